"""Partition owners of the delivery ledger: who owns (channel, topic, partition), and with which epoch.

A mixin of :class:`aldebaran.delivery.ledger.Ledger` (which supplies the store, the keys, the quarantine and
its counted writes), kept apart so that the ledger module stays readable. What the epoch fences is
described in aldebaran.delivery.runs.
"""

from __future__ import annotations

import json

from aldebaran.exceptions import AlreadyExists, NotFound, PreconditionFailed


class LedgerOwners:
    def take_partition(self, channel: str, topic: str, partition: int, owner: str) -> int:
        """Become the owner of (channel, topic, partition): returns the new epoch (previous + 1)."""
        key = self.owner_key(channel, topic, partition)
        while True:
            try:
                obj = self.store.get(key)
            except NotFound:
                body = {"epoch": 1, "owner": owner, "since": self.clock()}
                try:
                    self._write(self.store.create, key, json.dumps(body).encode())
                    return 1
                except AlreadyExists:
                    continue
            try:
                epoch = json.loads(obj.body)["epoch"] + 1
                if type(epoch) is not int or epoch < 2:
                    raise TypeError(f"epoch {epoch - 1!r} is not a whole number ≥ 1")
            except (ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
                # Quarantined, then overwritten under its ETag below (a racing taker's write wins, and we
                # read again), with an epoch above any handed out: see fresh_epoch.
                self.quarantine(key, f"partition owner cannot be read: {exc}", owner, channel, obj.body, remove=False)
                epoch = self.fresh_epoch()
            body = {"epoch": epoch, "owner": owner, "since": self.clock()}
            try:
                self._write(self.store.replace, key, json.dumps(body).encode(), obj.etag)
                return epoch
            except PreconditionFailed:
                continue  # someone else took it meanwhile: read again and go one higher

    def fresh_epoch(self) -> int:
        """The epoch after an unreadable owner object: the clock in milliseconds. Epochs otherwise grow by
        one per assignment, so they stay far below it (and below any later one: clocks within NTP's bounds,
        the lease's assumption too). Safety never rests on it: every run write is If-Match on the run's
        ETag; the epoch only decides who may adopt a claimed run, and a stale owner with a higher one has
        lost the partition in Kafka, so it adopts nothing more."""
        return int(self.clock() * 1000)

    def owner_epoch(self, channel: str, topic: str, partition: int) -> int:
        try:
            return int(json.loads(self.store.get(self.owner_key(channel, topic, partition)).body)["epoch"])
        except NotFound:
            return 0
