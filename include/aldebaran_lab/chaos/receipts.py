"""Receipts at a recipient, held to its channel's promise: what the campaigns report as `duplicated` and
`resent_same_key`.

A campaign counts receipts, every request or message the recipient got, not the alerts it kept: a
recipient that drops a repeat of a key it already has would otherwise hide every resend. Each receipt is
counted per key (the alert id, or what stands for it: the SMTP Message-ID, the SMS text), and what a
repeat means depends on the channel's :class:`~aldebaran.delivery.channels.base.Promise`:

- at least once under a stable key (webhook, Kafka bus, email): a repeat under the same key is a
  `resent_same_key`, the promise itself, not a failure; a copy under another key is `duplicated`;
- every other promise (at most once + IN_DOUBT, exactly once: SMS, push, log, the paging APIs): an
  alert received more than once is `duplicated`, and `resent_same_key` does not apply (None, "–").
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Hashable

from aldebaran.delivery.channels import KINDS
from aldebaran.delivery.channels.base import Promise

# The campaigns' channel names → (kind, provider lookup on), for their promise.
CAMPAIGN_CHANNELS = {"webhook": ("webhook", False), "bus": ("kafka", False), "sms": ("sms", False),
                     "sms_lookup": ("sms", True), "email": ("email", False), "log": ("log", False)}


def promise_of(channel: str) -> Promise:
    """The promise of one of the campaigns' channels, as its kind declares it (never restated here)."""
    kind, lookup = CAMPAIGN_CHANNELS[channel]
    cls = KINDS[kind]
    return cls.lookup_promise if lookup and cls.lookup_promise else cls.delivery_promise


def allows_same_key_resend(promise: Promise) -> bool:
    return promise is Promise.AT_LEAST_ONCE_STABLE_KEY


@dataclass(frozen=True)
class Receipts:
    """One recipient's receipts. `received`: keys received at least once; `receipts`: every receipt;
    `duplicated`: alerts received more than once against the promise (a failure); `resent_same_key`:
    receipts beyond the first per key where the promise allows them (None where it does not)."""

    promise: Promise
    received: int
    receipts: int
    duplicated: int
    resent_same_key: int | None

    def figures(self) -> dict:
        """The JSON figures of a recipient (the campaign details)."""
        return {"receipts": self.receipts, "duplicated": self.duplicated, "resent_same_key": self.resent_same_key}


def count(per_key: Mapping[Hashable, int], promise: Promise, other_key: int = 0) -> Receipts:
    """`per_key`: receipts per key (0 allowed); `other_key`: receipts whose key is not their alert's (on a
    stable-key channel the recipient cannot tell them from a new alert: always duplicated)."""
    got = [n for n in per_key.values() if n > 0]
    if allows_same_key_resend(promise):
        duplicated, resent = other_key, sum(n - 1 for n in got)
    else:
        duplicated, resent = sum(1 for n in got if n > 1) + other_key, None
    return Receipts(promise, len(got), sum(got), duplicated, resent)


def cell(resent: int | None) -> int | str:
    """The table cell of `resent_same_key` ("–": the promise does not allow a resend)."""
    return "–" if resent is None else resent


# --- receipts per key at each kind of recipient -------------------------------------------------------
def stats_per_key(stats: Mapping) -> Counter:
    """From an HTTP receiver's ``/_stats`` (``received_at`` and ``repeats``, alert id → n): receipts per
    alert id (a receiver in its own process: ``ReceiverProcess.stats(summary=False)``)."""
    out = Counter(dict.fromkeys(stats["received_at"], 1))
    out.update(stats.get("repeats") or {})
    return out


def log_lines_per_key(lines: Iterable[str]) -> Counter:
    """The log channel's file (one JSON line per send, its idempotency key first): lines per alert id."""
    return Counter(json.loads(line)["idempotency_key"] for line in lines if line.strip())


def recipient(stats: Mapping, ids: set[str], promise: Promise) -> dict:
    """One recipient's verdict from its ``/_stats`` against the expected alert `ids`: expected, received,
    lost (never received), duplicated, resent_same_key, unexpected (received, not expected)."""
    got = set(stats["received_at"])
    r = count(stats_per_key(stats), promise)
    return {"expected": len(ids), "received": len(got & ids), "lost": len(ids - got), **r.figures(),
            "unexpected": len(got - ids)}
