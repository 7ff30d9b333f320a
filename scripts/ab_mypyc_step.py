"""Same-run A/B of the shard step, interpreted against mypyc-compiled (issue 16 item 4).

Drives `ShardStore.apply` (the store's loop, the pure book step, freeze/thaw of rows) over 500,000 events
(100,000 orders × 1 request + 4 purchases, in 50,000-event batches, no snapshots) and prints the CPU
seconds of three runs. Run it once per source tree, alternating:

    pip install --target /tmp/mypyc-pkgs mypy
    cp -r include /tmp/mypyc-exp && cd /tmp/mypyc-exp
    PYTHONPATH=/tmp/mypyc-pkgs python /tmp/mypyc-pkgs/bin/mypyc --ignore-missing-imports \
        --follow-imports=skip aldebaran/audit/book.py aldebaran/audit/state/rows.py
    for i in 1 2 3 4; do for inc in $OLDPWD/include /tmp/mypyc-exp; do
        python scripts/ab_mypyc_step.py $inc; done; done

(rows.py needs `isinstance(book, bytes)` in `times` for mypy to narrow the union.) The result and the
decision (not compiled) are in docs/design.md §8, "Compiling the step".
"""

from __future__ import annotations

import random
import sys
import tempfile
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "include")

from aldebaran.audit import parse  # noqa: E402
from aldebaran.audit import book, rules  # noqa: E402
try:  # the event type of the tree under test: one of today's, or an older one's (A/B across trees)
    from aldebaran.model import Event as EventRow  # noqa: E402
except ImportError:
    from aldebaran.audit.findings import EventRow  # noqa: E402
from aldebaran.audit.state import rows as rowsmod  # noqa: E402
from aldebaran.audit.state.store import Config, ShardStore  # noqa: E402


def make_events(orders: int = 100_000, seed: int = 1) -> tuple[list[EventRow], int]:
    rng, t0, out = random.Random(seed), 1_700_000_000_000, []
    for i in range(orders):
        order = f"order-{i}"
        limit = rng.randint(1, 1000)
        out.append(EventRow(parse.REQUEST, order, order, limit, "Goldman", "AAPL", t0 + i))
        for j in range(4):
            out.append(EventRow(parse.PURCHASE, f"p-{i}-{j}", order, int(limit / 2 * rng.random()), "Goldman", "AAPL",
                                t0 + i + j))
    out.sort(key=lambda e: e.event_ts)
    return out, t0


def run(evs: list[EventRow], t0: int, batch: int = 50_000) -> float:
    store = ShardStore(Config(tempfile.mkdtemp(), rules.resolve(["overfill"]), snapshot_every=0), 0)
    cpu0 = time.process_time()
    for b in range(0, len(evs), batch):
        store.apply(b // batch, evs[b:b + batch], now_ms=t0 + 10_000)
    return time.process_time() - cpu0


if __name__ == "__main__":
    evs, t0 = make_events()
    compiled = [m.__name__ for m in (book, rowsmod) if not m.__file__.endswith(".py")]
    print(f"{sys.argv[1] if len(sys.argv) > 1 else 'include'} (compiled: {compiled or 'none'}):",
          " ".join(f"{run(evs, t0):.3f}" for _ in range(3)), "CPU s per 500,000 events")
