"""The delivery ledger's reads: runs (one, a partition's in offset order, the one covering an offset),
per-alert records, sent markers and the index listings — what the claim sequences, the handles, the tools
and the pages read back. A mixin of :class:`aldebaran.delivery.ledger.Ledger`, which supplies the store,
the keys and the quarantine; kept apart from the claims and conditional writes (ledger.py) so that each
reads in one sitting. The listings for checks and reports are in reports.py.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from aldebaran.delivery.records import Record
from aldebaran.delivery.runs import Run
from aldebaran.exceptions import LedgerCorrupt, NotFound
from aldebaran.storage.store import safe_segment

# How far before an offset run_covering looks for its run's key, in turn (offsets): a recent alert's run
# starts close before it, so the first listing nearly always finds it and reads a page at most.
COVER_WINDOWS = (64, 4096)


class LedgerReads:
    def get_run(self, channel: str, topic: str, partition: int, start: int) -> tuple[Run, str] | None:
        key = self.run_key(channel, topic, partition, start)
        try:
            obj = self.store.get(key)
        except NotFound:
            return None
        return Run.from_bytes(obj.body, key), obj.etag

    def runs(self, channel: str, topic: str, partition: int, from_offset: int = 0, until: int | None = None,
             readers: int = 1, corrupt: list | None = None) -> Iterator[Run]:
        """The partition's runs whose start is ≥ from_offset (and ≤ `until`, if given), in offset order
        (StartAfter: no full listing). `readers` > 1 reads that many runs at a time (a bounded range only:
        a takeover's dedupe window is hundreds of small objects, one round trip each). A corrupt run raises
        LedgerCorrupt, unless `corrupt` is given (a reader that only looks): then it is skipped and noted there."""
        prefix = self.run_prefix(channel, topic, partition)
        after = f"{prefix}{from_offset - 1:020d}.json" if from_offset > 0 else None
        keys: Iterator[str] = (obj["Key"] for obj in self.store.list(prefix, start_after=after))
        if until is not None:
            keys = itertools.takewhile(lambda k: _start(k[len(prefix):]) <= until, keys)
        if readers <= 1 or until is None:
            bodies: Iterator = ((k, self._body(k)) for k in keys)
        else:
            pool = ThreadPoolExecutor(readers, thread_name_prefix="ledger-runs")
            names = list(keys)
            bodies = zip(names, pool.map(self._body, names))
            pool.shutdown(wait=False)  # map() has submitted every read; the pool's threads end with them
        for k, b in bodies:
            if b is None:
                continue
            try:
                yield Run.from_bytes(b, k)
            except LedgerCorrupt as exc:
                if corrupt is None:
                    raise
                from aldebaran.delivery.corrupt import noted

                noted(exc, corrupt, "ledger runs")

    def _body(self, key: str) -> bytes | None:
        try:
            return self.store.get(key).body
        except NotFound:
            return None

    def run_covering(self, channel: str, topic: str, partition: int, offset: int, max_run: int,
                     corrupt: list | None = None) -> Run | None:
        """The run whose range holds `offset`: the run with the last start ≤ offset, found from its key
        alone (runs do not overlap), then read — one GET, whatever the partition's history. Its key is
        looked for in windows before `offset` that grow (:data:`COVER_WINDOWS`, then `max_run`, the longest
        a run is... unless malformed alerts or gaps stretched one), each a StartAfter listing of keys only.
        A corrupt run raises LedgerCorrupt, unless `corrupt` is given: then it is noted there, None returned."""
        prefix = self.run_prefix(channel, topic, partition)
        for back in [*(w for w in COVER_WINDOWS if w < max_run), max_run]:
            first = max(0, offset - back)
            after = f"{prefix}{first - 1:020d}.json" if first > 0 else None
            keys = (o["Key"] for o in self.store.list(prefix, start_after=after, page_size=min(back + 2, 1000)))
            last = None
            for key in itertools.takewhile(lambda k: _start(k[len(prefix):]) <= offset, keys):
                last = key
            if last is not None:
                start = _start(last[len(prefix):])
                run = next(self.runs(channel, topic, partition, start, until=start, corrupt=corrupt), None)
                return run if run is not None and run.start <= offset <= run.end else None
            if first == 0:
                return None
        return None

    def run_at(self, key: str) -> Run | None:
        """The run stored under `key` (a sent marker's body), or None."""
        try:
            return Run.from_bytes(self.store.get(key).body, key)
        except NotFound:
            return None

    def get(self, channel: str, alert_id: str) -> tuple[Record, str] | None:
        key = self.key(channel, alert_id)
        try:
            obj = self.store.get(key)
        except NotFound:
            return None
        record = Record.from_bytes(obj.body, key)
        if (record.channel, record.alert_id) != (channel, alert_id):  # its next write would go elsewhere
            why = f"names {record.channel}/{record.alert_id!r}, not {channel}/{alert_id}"
            raise LedgerCorrupt(f"delivery record {key} {why}", key, why)
        return record, obj.etag

    def sent_by(self, channel: str, alert_id: str) -> str | None:
        """The run key an alert's sent marker names, or None (no marker: never marked on this channel)."""
        try:
            return self.store.get(self.sent_key(channel, alert_id)).body.decode()
        except NotFound:
            return None

    def indexed(self, kind: str, channel: str) -> list[str]:
        """Alert ids listed in one index (retry, dead, in_doubt) of a channel."""
        prefix = f"{self.prefix}-index/{kind}/{safe_segment(channel, 'channel')}/"
        return [o["Key"][len(prefix):] for o in self.store.list(prefix)]

    def _indexed_id(self, kind: str, channel: str, alert_id: str) -> str:
        """An id listed in an index, checked: an odd one (a key no ledger writes) is LedgerCorrupt."""
        try:
            return safe_segment(alert_id, "alert id")
        except ValueError as exc:
            key = f"{self.prefix}-index/{kind}/{channel}/{alert_id}"
            raise LedgerCorrupt(f"index key {key} is odd: {exc}", key, f"odd index key: {exc}") from None


def _start(name: str) -> int:
    """A run key's start offset (``<start:020d>.json``); a name no ledger writes sorts last (not a run)."""
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() else 1 << 62
