"""What the delivery ledger hands out: a handle on one delivery, whose ``report`` is its only write.

    Attempt     one alert on one channel through its own record (the supervisor's pages,
                the sweep's retries and lookups): Ledger.attempt / retry / doubted
    RunHandle   a run of one partition's alerts on one channel (the group commit): Ledger.open_run

The ledger's claim sequences decide what a handle is for (its ``status``); the dispatcher sends what the
handle holds and reports the outcome; the aggregate transitions (Record.apply, Run.apply) and the handle
stores it under the condition it was claimed with (If-Match on its ETag), so a worker that lost the
delivery to another can never write past it.
"""

from __future__ import annotations

from aldebaran.delivery.records import DELIVERED, IN_DOUBT, Record
from aldebaran.delivery.runs import Run
from aldebaran.model import Alert
from aldebaran.storage.store import writer_token

# What a claim sequence found. SEND: the handle holds what to send. ALREADY: settled (for now: a retry
# not yet due counts too). BUSY: another worker holds it under a live lease, or moved it meanwhile.
# DOUBT: an expired lease on a channel that cannot deduplicate (now IN_DOUBT, nothing to send).
SEND, ALREADY, BUSY, DOUBT = "send", "already", "busy", "in_doubt"
# A run's: NEW (claimed now) and OURS (claimed by this owner, which failed before sending) send their
# pending alerts; ADOPTED (a stale owner's, taken over) sends what the channel allows after a crash;
# RECORDED: skip its range; WAIT: its range reaches past what is polled; CONTESTED: someone else created
# it meanwhile (read it on the next turn).
NEW, OURS, ADOPTED, RECORDED_RUN, WAIT, CONTESTED = "new", "ours", "adopted", "recorded", "wait", "contested"


class Attempt:
    """One alert's delivery on one channel through its own record."""

    def __init__(self, ledger, channel, status: str, record: Record | None = None,
                 etag: str | None = None) -> None:
        self.ledger, self.channel, self.status = ledger, channel, status
        self.record, self.etag = record, etag
        self.alert: Alert | None = record.alert if record is not None else None  # what to send

    def report(self, outcome) -> str:
        """Store one send's outcome: "sent", "failed" (RETRY, or DEAD), "in_doubt", or "busy" when the record
        moved under this worker after its claim (another rescued it: its write wins)."""
        if self.status != SEND:
            raise ValueError(f"{self.channel.name}: an attempt that is {self.status} has nothing to report")
        ledger, record = self.ledger, self.record
        previous = record.state
        record.apply(outcome, ledger.clock(), ledger.policy, self.channel.can_dedupe)
        self.etag, self.status = ledger.save(record, self.etag, previous), ALREADY
        if self.etag is None:
            return BUSY
        return {DELIVERED: "sent", IN_DOUBT: "in_doubt"}.get(record.state, "failed")

    def report_lookup(self, found: dict | None) -> bool:
        """Store the provider's answer about an IN_DOUBT delivery (its receipt, or None: it has no such
        message, so the record is due for a first real send). False if the record moved meanwhile."""
        previous = self.record.state
        self.record.settled_by_lookup(self.ledger.clock(), found)
        self.etag = self.ledger.save(self.record, self.etag, previous)
        return self.etag is not None


class RunHandle:
    """A run of one partition's alerts on one channel, as the claim sequence left it (``status``)."""

    def __init__(self, ledger, channel, status: str, run: Run, etag: str | None = None,
                 previous: str | None = None) -> None:
        self.ledger, self.channel, self.status, self.run, self.etag = ledger, channel, status, run, etag
        self.previous = previous  # the owner an adopted run was taken from
        self.key = ledger.run_key(run.channel, run.topic, run.partition, run.start)
        self._records: list[Record] | None = None  # exception records not yet stored
        # The record write's writer token, the same for every try: a try whose reply was lost is then
        # recognised by the storage layer as ours on the next one, not taken for another owner's adoption.
        self._token = writer_token()

    def claim_sent(self, alert_id: str) -> str | None:
        """The sent marker of one alert, before its first send: None if this run holds it (created now, or
        by this run before an adoption), else the run key of the run that does (a repeat: not sent here)."""
        return self.ledger.claim_sent(self.channel.name, alert_id, self.key)

    def report(self, outcomes: dict) -> None:
        """Record every outcome (offset → Outcome, for the pending entries) in one write: the failed alerts'
        own records first (a crash between the writes loses nothing), then the run. Fenced if a newer
        owner adopted the run meanwhile. Idempotent: after an object-store error, call it again."""
        ledger, run = self.ledger, self.run
        if self._records is None:
            self._records = run.apply(outcomes, ledger.clock(), self.key, ledger.policy, self.channel.can_dedupe)
        while self._records:
            ledger.create(self._records[0])  # None: the alert has a record (an earlier run's): it carries on
            self._records.pop(0)
        self.etag = ledger.save_run(run, self.etag, self._token)
