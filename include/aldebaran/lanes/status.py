"""`aldebaran lanes run|status|stop|resolve`: the two alert lanes side by side, and the fast lane's operation.

``status`` shows the exact lane (the micro-batch auditor's heartbeat: status, last batch, age) and the
low-latency lane (its keeper's heartbeat: status, the query, reconciliation counts, the alerts the exact
lane never confirmed). ``--json`` prints the same as one object (what ``platform_health`` reads too).

It reads bounded state only: the two heartbeats, and the records of the first :data:`SHOWN` unconfirmed
ids the keeper's heartbeat names (one GET each). The count and the oldest one's age come from the
reconciler's own counts in that heartbeat, so the answer takes the same time at ten unconfirmed alerts
as at ten thousand. ``--full`` lists every unconfirmed record instead (one GET per record: slow on a
platform with many; for an operator who wants them all, not for health).
"""

from __future__ import annotations

import argparse
import json
import time

SHOWN = 20  # unconfirmed records read and shown (by id, from the heartbeat)


def collect(now: float | None = None, lanes=None, exact: tuple[str, dict | None] | None = None,
            full: bool = False) -> dict:
    """Both lanes' state, as plain JSON. A caller that has them already passes `lanes` (the LaneSettings)
    and `exact` (the auditor's query name and its heartbeat, None when it has none); else they are read here.
    `full`: every unconfirmed record, listed (slow); else the heartbeat's count and its first ids' records."""
    from aldebaran.runtime import heartbeat
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.lanes import keeper, reconciler
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.storage.store import open_store
    from aldebaran.settings import KafkaSettings, load

    now = now or time.time()
    lanes = lanes or load(LaneSettings)
    kafka = load(KafkaSettings)
    if exact is None:
        query = load(AuditorSettings).query_name
        exact_hb = heartbeat.read(open_store(), heartbeat.AUDITOR, query)
    else:
        query, exact_hb = exact
    exact = {"lane": "exact", "query": query, "topic": kafka.alerts_topic, "heartbeat": exact_hb is not None}
    if exact_hb:
        exact.update(status=exact_hb.get("status"), batch_id=exact_hb.get("batch_id"),
                     age_seconds=round(max(0.0, now - exact_hb["updated_at_ms"] / 1000), 1),
                     processed_rows_per_second=exact_hb.get("processed_rows_per_second"))
    store = keeper.lane_store()
    fast_hb = heartbeat.read(store, heartbeat.LANE, lanes.name)
    rec = (fast_hb or {}).get("reconcile") or {}
    if full:
        records = reconciler.list_records(store, lanes.records_prefix, lanes.name)
        count = len(records)
    else:
        records = _records(store, lanes, rec.get("unconfirmed_ids") or [])
        count = (rec.get("counts") or {}).get("unconfirmed")  # None: no reconciler has reported yet
    oldest = min((r.get("fast_ts") or 0 for r in records), default=None) if full else rec.get("oldest_unconfirmed_ms")
    fast = {"lane": lanes.name, "enabled": lanes.enabled, "topic": kafka.fast_alerts_topic,
            "heartbeat_uri": store.uri(heartbeat.key(heartbeat.LANE, lanes.name)), "heartbeat": fast_hb is not None,
            "source": "records (full listing)" if full else "heartbeat",
            "unconfirmed_count": count,
            "oldest_unconfirmed_age_seconds": round(max(0.0, now - oldest / 1000), 1) if oldest else None,
            "unconfirmed": sorted(records, key=lambda r: r.get("fast_ts") or 0)}
    if fast_hb:
        fast.update(status=fast_hb.get("status"), age_seconds=round(max(0.0, now - float(fast_hb.get("at") or 0)), 1),
                    host=fast_hb.get("host"), pid=fast_hb.get("pid"), process=fast_hb.get("lane"),
                    reconcile=fast_hb.get("reconcile"), error=fast_hb.get("error"), gaps=fast_hb.get("gaps"))
    return {"at": now, "exact": exact, "fast": fast}


def _records(store, lanes, ids: list[str]) -> list[dict]:
    """The records of the first :data:`SHOWN` ids (one GET each); an id confirmed or resolved since the
    heartbeat has no record any more and is left out."""
    from aldebaran.lanes import reconciler
    from aldebaran.storage.store import read_json

    out = []
    for alert_id in ids[:SHOWN]:
        got = read_json(store, reconciler.record_key(lanes.records_prefix, lanes.name, alert_id))
        if got is not None:
            out.append(got)
    return out


def render(state: dict) -> str:
    exact, fast = state["exact"], state["fast"]
    lines = []
    if exact["heartbeat"]:
        lines.append(f"exact lane   auditor query {exact['query']} → {exact['topic']}: {exact['status']}, batch "
                     f"{exact['batch_id']}, heartbeat {exact['age_seconds']}s ago")
    else:
        lines.append(f"exact lane   auditor query {exact['query']} → {exact['topic']}: no heartbeat (not started)")
    if not fast["heartbeat"]:
        lines.append(f"fast lane    {fast['lane']}: no heartbeat at {fast['heartbeat_uri']} (not started; "
                     "`aldebaran lanes run`, or unpause the lane_supervisor DAG)")
    else:
        process = fast.get("process") or {}
        query = process.get("query") or {}
        lines.append(f"fast lane    {fast['lane']} → {fast['topic']}: {fast['status']}, heartbeat "
                     f"{fast['age_seconds']}s ago (keeper pid {fast['pid']} on {fast['host']}; query "
                     f"{'active' if query.get('active') else 'not active'}, lane pid {process.get('pid')})")
        rec = fast.get("reconcile") or {}
        counts = rec.get("counts") or {}
        if counts:
            lines.append("reconcile    " + ", ".join(f"{k} {v}" for k, v in counts.items())
                         + f"; pending {rec.get('pending_fast')} fast / {rec.get('pending_exact')} exact "
                         f"(ttl {rec.get('ttl_ms', 0) / 1000:.0f}s)")
        gaps = fast.get("gaps") or {}
        if gaps.get("count"):
            last = gaps.get("last") or {}
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(last.get("at") or 0)))
            lines.append(f"gaps         {gaps['count']} checkpoint gap(s), {gaps.get('skipped') or 0} trade(s) known "
                         f"skipped; last at {when}: {last.get('describe')}; old checkpoint kept at "
                         f"{last.get('abandoned')}")
        if fast.get("error"):
            lines.append(f"error        {str(fast['error'])[:800]}")
    unconfirmed = fast["unconfirmed"]
    count = fast.get("unconfirmed_count", len(unconfirmed))
    age = fast.get("oldest_unconfirmed_age_seconds")
    lines.append(f"unconfirmed  {'unknown (no reconciler counts yet)' if count is None else count} fast-lane alert(s) "
                 "the exact lane never confirmed (not delivered)"
                 + (f"; oldest {age:.0f}s ago" if age is not None else "")
                 + (f"; first {len(unconfirmed)} shown (all: --full, slow)" if count and count > len(unconfirmed) else "")
                 + "".join(f"\n  {r['alert_id']}  order {(r.get('alert') or {}).get('order_id')}  {r.get('why')}"
                           for r in unconfirmed[:SHOWN]))
    return "\n".join(lines)


ACTIONS = {
    "run": "the lane keeper: the real-time job and its reconciler (what lane_supervisor starts)",
    "status": "both lanes: the exact lane's and the low-latency lane's progress, unconfirmed alerts",
    "stop": "stop the lane keeper on this host",
    "resolve": "settle an unconfirmed fast alert by hand, with a reason",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from aldebaran.runtime.cliparse import add_modes, opt

    add_modes(p, "action", ACTIONS, [
        opt("alert_id", modes="resolve", nargs="?", help="the unconfirmed alert's id"),
        opt("--reason", modes="resolve", help="why it is settled (kept in its record)"),
        opt("--json", modes="status", action="store_true", help="one JSON object"),
        opt("--full", modes="status", action="store_true",
            help="list and read every unconfirmed record (slow: one GET per record) instead of the heartbeat's "
                 "counts and first ids"),
    ], title="actions")


def main(args: argparse.Namespace) -> int:
    """``run``, ``status``, ``resolve``; ``stop`` is the lane supervisor's (aldebaran.cli.main routes it there)."""
    from aldebaran.exceptions import ConfigError

    if args.action == "run":
        from aldebaran.lanes.keeper import run

        return run()
    if args.action == "resolve":
        import getpass

        from aldebaran.lanes import keeper, reconciler
        from aldebaran.lanes.settings import LaneSettings
        from aldebaran.settings import load

        if not args.alert_id or not args.reason:
            raise ConfigError("aldebaran lanes resolve needs ALERT_ID and --reason")
        cfg = load(LaneSettings)
        record = reconciler.resolve(keeper.lane_store(), cfg.records_prefix, cfg.name, args.alert_id, args.reason,
                                    by=getpass.getuser())
        print(json.dumps(record, default=str))
        return 0
    state = collect(full=args.full)
    print(json.dumps(state, default=str, indent=1) if args.json else render(state))
    return 0
