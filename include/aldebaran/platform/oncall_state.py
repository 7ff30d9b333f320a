"""The on-call page's open findings: which ones a DAG has paged and not resolved yet.

One small JSON object per DAG in the object store, ``<ALDEBARAN_ONCALL_STATE_PREFIX>/<dag id>.json``::

    {"open": {"<finding key>": {"summary": ..., "opened_at": <epoch s>, "last_seen": <epoch s>,
                                "sent": true|false}}}

It is what turns a 5-minute cadence of the same failure into one incident and lets a green run resolve
exactly what was paged. :func:`plan` (pure) compares it with the run's findings; :func:`settle` folds
the sends' results back in: a page the provider did not take stays ``sent: false`` and is sent again by
the next failing run; a resolve the provider did not take stays open and is retried by the next run.
Read and written with If-Match/If-None-Match (:func:`load`, :func:`save`): the DAGs run one at a time,
so a conflict means a run overlapped, and the later run's view wins next time.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from aldebaran.exceptions import AlreadyExists, NotFound, PreconditionFailed
from aldebaran.storage.store import Store, safe_segment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What one run sends: `new` findings to page (never sent, or their send failed), `still` open and
    already paged (re-posted only where the provider needs it: Alertmanager), `gone` paged and no longer
    found (to resolve), `dropped` no longer found and never paged (forgotten without a resolve)."""

    new: list[str] = field(default_factory=list)
    still: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def plan(open_findings: dict[str, dict], findings: dict[str, dict]) -> Plan:
    """Compare the open findings with this run's (a green run has none: every open one is gone)."""
    out = Plan()
    for key in sorted(findings):
        held = open_findings.get(key)
        (out.still if held and held.get("sent") else out.new).append(key)
    for key in sorted(set(open_findings) - set(findings)):
        (out.gone if open_findings[key].get("sent") else out.dropped).append(key)
    return out


def settle(open_findings: dict[str, dict], findings: dict[str, dict], the_plan: Plan, sent: set[str],
           resolved: set[str], now: float) -> dict[str, dict]:
    """The open findings after this run: `sent` the keys the provider took a page for, `resolved` those
    it took a resolve for. A finding keeps its first ``opened_at`` for as long as it stays open."""
    out: dict[str, dict] = {}
    for key in the_plan.new + the_plan.still:
        held = open_findings.get(key) or {}
        out[key] = {"summary": findings[key].get("summary", ""), "opened_at": held.get("opened_at", now),
                    "last_seen": now, "sent": bool(held.get("sent")) or key in sent}
    for key in the_plan.gone:
        if key not in resolved:  # the resolve failed: still open, retried by the next run
            out[key] = open_findings[key]
    return out


def state_key(prefix: str, dag_id: str) -> str:
    return f"{prefix.strip('/')}/{safe_segment(dag_id, 'DAG id')}.json"


def load(store: Store, key: str) -> tuple[dict[str, dict], str | None]:
    """(open findings, etag); ({}, None) when the DAG has never paged."""
    try:
        obj = store.get(key)
    except NotFound:
        return {}, None
    return dict(obj.json().get("open") or {}), obj.etag


def save(store: Store, key: str, open_findings: dict[str, dict], etag: str | None) -> bool:
    """Write the open findings conditionally; False (logged) if another run changed them meanwhile."""
    body = json.dumps({"open": open_findings}, separators=(",", ":"), default=str).encode()
    try:
        if etag is None:
            store.create(key, body)
        else:
            store.replace(key, body, etag)
    except (AlreadyExists, PreconditionFailed):
        log.warning("on-call state %s changed during this run (an overlapping run?): not overwritten",
                    store.uri(key))
        return False
    return True
