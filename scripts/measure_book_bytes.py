"""Same-run measurement of what an open book costs in memory, before/after a change to the book (issue 17
item 7: the trail of Kafka coordinates `aldebaran explain` reads).

Drives `ShardStore.apply` (one shard, local files, no snapshots, a TTL long enough that no book expires)
with ORDERS orders of EVENTS events each (a request then purchases; 2 is the books benchmark's shape, 5
the original publisher's), in batches of 100,000 events generated lazily, and prints per open book: the
process's RSS growth, the mean frozen row length, and the CPU time per event. Events carry a Kafka
partition and offset when the tree's event type has them (offsets from 50,000,000, 2 partitions; an
order's events GAP offsets apart in its partition, default 1: adjacent). Run it once per source tree,
alternating:

    git archive <base> include | tar -x -C /tmp/before
    for i in 1 2; do for inc in /tmp/before/include include; do
        python scripts/measure_book_bytes.py $inc 1000000 2 [GAP]; done; done

The results are in docs/design.md §8 ("What explain keeps").
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "include")

from aldebaran.audit import parse  # noqa: E402
from aldebaran.audit import rules  # noqa: E402
try:  # the event type of the tree under test: one of today's, or an older one's (A/B across trees)
    from aldebaran.model import Event as EventRow  # noqa: E402
except ImportError:
    from aldebaran.audit.findings import EventRow  # noqa: E402
from aldebaran.audit.state.store import Config, ShardStore  # noqa: E402

BATCH = 100_000
T0 = 1_700_000_000_000


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def batches(orders: int, per_order: int, gap: int = 1):
    coords = "partition" in EventRow._fields
    offsets = [50_000_000, 50_000_000]
    out = []
    for i in range(orders):
        order = f"order-{i:09d}"
        part = i % 2
        for j in range(per_order):
            kind = parse.REQUEST if j == 0 else parse.PURCHASE
            event_id = order if j == 0 else f"{order}-p{j}"
            fields = (kind, event_id, order, 100 if j == 0 else 10, "Goldman", "AAPL", T0 + i)
            out.append(EventRow(*fields, part, offsets[part] + j * gap) if coords else EventRow(*fields))
            offsets[part] += 1
            if len(out) == BATCH:
                yield out
                out = []
    if out:
        yield out


def main(orders: int, per_order: int, gap: int) -> None:
    store = ShardStore(Config(tempfile.mkdtemp(), rules.resolve(["overfill"]), ttl_ms=10**12,
                              snapshot_every=0), 0)
    gc.collect()
    before = rss_bytes()
    cpu = 0.0
    for b, evs in enumerate(batches(orders, per_order, gap)):
        t = time.process_time()
        store.apply(b, evs, now_ms=T0)
        cpu += time.process_time() - t
        del evs
    gc.collect()
    grown = rss_bytes() - before
    shard = store.load(b)
    rows = list(shard.books.values())
    mean_row = sum(len(r) for r in rows) / len(rows)
    print(f"{sys.argv[1] if len(sys.argv) > 1 else 'include'}: {len(rows):,} books x {per_order} events, gap {gap}: "
          f"RSS growth {grown / len(rows):.1f} B/book, frozen row {mean_row:.1f} B, "
          f"step {cpu / (orders * per_order) * 1e6:.2f} us CPU/event")


if __name__ == "__main__":
    main(*(int(a) for a in (sys.argv[2:5] + ["1000000", "2", "1"][len(sys.argv[2:5]):])))
