"""Corrupt ledger objects met by the processes that only look (the Deliveries page, `aldebaran deliveries`,
explain), and the quarantine's size (BRIEF §2).

A reader that only looks must not die on one bad object, nor move it: moving is the dispatcher's (its sweep
quarantines a corrupt record or odd index key, aldebaran.delivery.dispatcher; its settle step marks a corrupt
run, :func:`set_aside`). So a looking reader skips the object, logs its key and reason, and lists it in
what it shows (``{"key", "reason"}`` dicts, the page's "Corrupt" section, the CLI's lines).
"""

from __future__ import annotations

import itertools
import logging

from aldebaran.exceptions import LedgerCorrupt, ObjectStoreError
from aldebaran.storage.quarantine import WHY
from aldebaran.storage.store import safe_segment

log = logging.getLogger(__name__)

# Objects listed at most to count the quarantine: one S3 list page, so the page and health stay cheap
# however much piles up (the count then reads "≥ N").
SCAN_CAP = 1000


def noted(exc: LedgerCorrupt, corrupt: list | None, reader: str) -> None:
    """Log a corrupt object a reader skipped, and add it to `corrupt` (what the reader shows)."""
    log.warning("%s: skipped the corrupt ledger object %s (%s); not moved by a reader that only looks",
                reader, exc.key, exc.reason)
    if corrupt is not None and all(c["key"] != exc.key for c in corrupt):
        corrupt.append({"key": exc.key, "reason": exc.reason})


def record(ledger, channel: str, alert_id: str, corrupt: list | None, reader: str):
    """``ledger.get``, with a corrupt record (or an alert id no ledger writes, listed under its prefix)
    skipped (None) and noted in `corrupt`."""
    try:
        safe_segment(alert_id, "alert id")
        return ledger.get(channel, alert_id)
    except LedgerCorrupt as exc:
        noted(exc, corrupt, reader)
    except ValueError as exc:  # the id itself: its key cannot even be built
        key = f"{ledger.prefix}/{channel}/alerts/{alert_id}.json"
        noted(LedgerCorrupt(f"odd record key {key}: {exc}", key, f"odd record key: {exc}"), corrupt, reader)
    return None


def quarantined(ledger, cap: int = SCAN_CAP) -> dict:
    """How many objects the ledger's quarantine holds: {"count", "capped", "where"}, from at most `cap`
    listed keys (each copy has a ``.why.json`` beside it: those are counted)."""
    prefix = ledger.quarantine_prefix()
    keys = [o["Key"] for o in itertools.islice(ledger.store.list(prefix), cap)]
    return {"count": sum(1 for k in keys if k.endswith(WHY)), "capped": len(keys) >= cap,
            "where": ledger.store.uri(prefix)}


def set_aside(ledger, exc: Exception, owner: str, channel: str) -> str:
    """Why a dispatcher's partition stops (its message). A corrupt run (the only ledger object its settle step
    reads) is marked: copied to the quarantine with its reason, the original left in place. Moving it would
    let a new claim at its start succeed and send its alerts again (an SMS twice), so the key stays taken
    and the partition stops, the others go on; an operator checks what it sent, then deletes it."""
    if isinstance(exc, LedgerCorrupt) and exc.key:
        try:
            ledger.quarantine(exc.key, f"{exc.reason} (left in place: its partition stops until an operator "
                                       "removes it)", owner, channel, remove=False)
        except ObjectStoreError as err:  # the partition stops all the same; the next owner marks it again
            log.warning("%s: could not mark %s in the quarantine: %s", channel, exc.key, err)
    return str(exc)
