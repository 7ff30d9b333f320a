"""The delivery ledger's listings: what checks, campaigns, reports and the UI read, never the delivery path.

Each lists a channel's part of the ledger (or its small index): :class:`LedgerReports` is the base of
:class:`aldebaran.delivery.ledger.Ledger`, which supplies the store, the keys and the record reads.
"""

from __future__ import annotations

from aldebaran.delivery.runs import DELIVERED, PENDING, Run


class LedgerReports:
    def channels(self) -> list[str]:
        """Channels with anything in the ledger: one short listing per channel, whatever its history. The
        store contract has no delimiter, so each listing takes the first key after the previous channel's
        keys (``StartAfter <prefix>/<channel>0``: '0' sorts just after '/', and a channel name is a safe
        segment, so no other channel's keys lie between) and reads no further."""
        seen: list[str] = []
        after = None
        while True:
            first = next(iter(self.store.list(self.prefix + "/", start_after=after, page_size=1)), None)
            if first is None:
                return seen
            name = first["Key"][len(self.prefix) + 1:].split("/", 1)[0]
            seen.append(name)
            after = f"{self.prefix}/{name}0"

    def states(self, channel: str) -> dict[str, str]:
        """alert id → its delivery state on this channel (DELIVERED from a run's entry; a per-alert
        record's state wins). Lists the channel's whole ledger: for checks and campaigns that verify a
        finished run."""
        out: dict[str, str] = {}
        records: dict[str, str] = {}
        for key, run, alert_id in self._objects(channel):
            if run is not None:
                for e in run.entries:
                    if e[2] == DELIVERED:
                        out.setdefault(e[1], "DELIVERED")
                    elif e[2] == PENDING:
                        out.setdefault(e[1], "CLAIMED")
            else:
                got = self.get(channel, alert_id)
                if got is not None:
                    records[got[0].alert_id] = got[0].state
        out.update(records)
        return out

    def known_alert_ids(self, channel: str) -> set[str]:
        """Every alert id this channel has a run entry or a record for. Lists the channel's whole ledger:
        for batch reports (a replay's "which alerts are new")."""
        ids: set[str] = set()
        for _key, run, alert_id in self._objects(channel):
            if run is not None:
                ids.update(run.alert_ids())
            else:
                ids.add(alert_id)
        return ids

    def stats(self, channel: str) -> dict:
        """Per-channel figures from the small index (delivered counts come from the consumer group's
        committed offsets: see aldebaran.delivery.tools)."""
        return {
            "channel": channel,
            "retrying": len(self.indexed("retry", channel)),
            "dead": len(self.indexed("dead", channel)),
            "in_doubt": len(self.indexed("in_doubt", channel)),
            "lease_seconds": self.lease_seconds,
            "max_attempts": self.policy.max_attempts,
        }

    def _objects(self, channel: str):
        """(key, Run | None, alert id | None) for each run and per-alert record of the channel."""
        for obj in self.store.list(f"{self._channel(channel)}/"):
            key = obj["Key"]
            if "/runs/" in key:
                yield key, Run.from_bytes(self.store.get(key).body, key), None
            elif "/alerts/" in key and key.endswith(".json"):
                yield key, None, key.rsplit("/", 1)[1][: -len(".json")]
