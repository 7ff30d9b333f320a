"""What the Deliveries pages read from the delivery ledger (aldebaran.delivery.pages renders it).

Read-only: a corrupt record or run met here is skipped and listed in the channel's ``corrupt``
(aldebaran.delivery.corrupt), never raised and never moved, so one bad object cannot take the page down;
the quarantine's size (what the dispatchers set aside) and the alerts dead-lettered to alerts.dlq are shown
beside it.
"""

from __future__ import annotations

from aldebaran.delivery.corrupt import noted, record

ATTENTION = (("in_doubt", "In doubt"), ("dead", "Dead"), ("retry", "Retrying / in flight"))
READER = "deliveries page"


def latest_records(ledger, channel: str, limit: int, corrupt: list | None = None) -> list:
    """The `limit` most recently written per-alert records of a channel, newest first (failures, doubts,
    pages: alerts delivered inside a run have no record of their own; find them by id). The listing's
    LastModified picks them, so only `limit` records are read."""
    from aldebaran.storage.store import safe_segment

    prefix = f"{ledger.prefix}/{safe_segment(channel, 'channel')}/alerts/"
    newest = sorted(ledger.store.list(prefix), key=lambda o: o["LastModified"], reverse=True)
    ids = [o["Key"][len(prefix):-len(".json")] for o in newest if o["Key"].endswith(".json")]
    records = [got[0] for alert_id in ids[:limit]
               if "/" not in alert_id and (got := record(ledger, channel, alert_id, corrupt, READER))]
    return sorted(records, key=lambda r: r.updated_at, reverse=True)[:limit]


def attention(ledger, channel: str, limit: int, corrupt: list | None = None) -> list[tuple[str, str, int, list]]:
    """(kind, title, how many are indexed, up to `limit` of their records) per index of the channel.

    A marker can outlive its record's stay in that state (the ledger writes markers first and removes
    them last); such records are left out, so the count is an upper bound. So is an odd index key (the
    dispatcher's sweep quarantines it): it is listed in `corrupt`."""
    from aldebaran.delivery.records import DELIVERED
    from aldebaran.exceptions import LedgerCorrupt

    sections = []
    for kind, title in ATTENTION:
        ids = ledger.indexed(kind, channel)
        records = []
        for alert_id in ids[:limit]:
            try:
                got = record(ledger, channel, ledger._indexed_id(kind, channel, alert_id), corrupt, READER)
            except LedgerCorrupt as exc:  # the odd index key itself
                noted(exc, corrupt, READER)
                continue
            if got is not None and got[0].state != DELIVERED:
                records.append(got[0])
        sections.append((kind, title, len(ids), records))
    return sections


def overview(ledger, limit: int, fast_topic: str | None = None) -> list[dict]:
    """Per channel in the ledger: its figures (and whether the fast lane delivers it: `fast_topic`, default
    ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC), what needs attention, its latest records, its retractions, and the
    corrupt objects met on the way (``[{"key", "reason"}]``)."""
    if fast_topic is None:
        from aldebaran.settings import KafkaSettings, load

        fast_topic = load(KafkaSettings).fast_alerts_topic
    out = []
    for channel in ledger.channels():
        corrupt: list = []
        out.append({"stats": {**ledger.stats(channel), "fast": delivers_fast(ledger, channel, fast_topic)},
                    "attention": attention(ledger, channel, limit, corrupt),
                    "latest": latest_records(ledger, channel, limit, corrupt),
                    "retractions": retractions(ledger, channel, limit, corrupt), "promise": channel_promise(channel),
                    "corrupt": corrupt})
    return out


def channel_promise(channel: str) -> dict | None:
    """What the channel's kind promises (``Channel.promise``: its deduplication key, in-doubt policy and
    provider rate), the kind found as dispatch finds it outside Airflow: its connection's conn_type, else its
    name. None when neither names a kind (the page then says so)."""
    from aldebaran.delivery.channels import CONN_TYPES, KINDS, env_connection
    from aldebaran.exceptions import ConfigError

    try:
        conn = env_connection(channel)
    except ConfigError:  # a malformed connection: its dispatcher says so; the page shows no promise
        conn = None
    kind = CONN_TYPES.get(conn.conn_type) if conn is not None and conn.conn_type else None
    kind = kind or (channel if channel in KINDS else None)
    if not kind:
        return None
    try:  # a provider lookup (SMS ``lookup: true``) changes the promise
        lookup = conn is not None and conn.extra_bool("lookup", False)
    except ConfigError:
        lookup = False
    return KINDS[kind].promise(lookup=lookup)


def delivers_fast(ledger, channel: str, fast_topic: str) -> bool:
    """Whether the channel is delivered from the fast lane: a fast dispatcher has owned a partition of the
    fast topic for it (what the ledger shows, whatever the configuration says now)."""
    from aldebaran.storage.store import safe_segment

    prefix = f"{ledger.prefix}/{safe_segment(channel, 'channel')}/owners/{safe_segment(fast_topic, 'topic')}/"
    return any(True for _ in ledger.store.list(prefix))


def retractions(ledger, channel: str, limit: int, corrupt: list | None = None) -> list:
    """The channel's retractions and reinstatements of fast-lane alerts (aldebaran.delivery.retraction) that
    have a record of their own, newest first: per-alert records whose id starts ``retract-`` / ``reinstate-``.
    The fast dispatcher delivers them in runs, so only a failed (RETRY, DEAD) or IN_DOUBT send has one, and
    records a keeper wrote before retractions went through the fast topic; `aldebaran explain` shows the rest."""
    from aldebaran.storage.store import safe_segment

    base = f"{ledger.prefix}/{safe_segment(channel, 'channel')}/alerts/"
    found = [o for start in ("retract-", "reinstate-") for o in ledger.store.list(base + start)]
    newest = sorted(found, key=lambda o: o["LastModified"], reverse=True)[:limit]
    ids = [o["Key"][len(base):-len(".json")] for o in newest if o["Key"].endswith(".json")]
    return [got[0] for alert_id in ids if (got := record(ledger, channel, alert_id, corrupt, READER))]


def rejected(store) -> int | None:
    """Alerts the streaming dispatchers dead-lettered to alerts.dlq since each started (their heartbeats'
    ``malformed``, as platform_health shows them): one listing and one read per dispatcher. None when the
    heartbeats cannot be read (the page still renders)."""
    from aldebaran.runtime import heartbeat
    from aldebaran.exceptions import ObjectStoreError

    try:
        beats = heartbeat.read_all(store, heartbeat.DISPATCHER)
    except (ObjectStoreError, ValueError):  # ValueError: a heartbeat that is not JSON (being rewritten)
        return None
    return sum(int(b.get("malformed") or 0) for b in beats if isinstance(b, dict))
