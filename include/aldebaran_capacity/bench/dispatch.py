"""Dispatch benchmark: deliveries/s per channel through the group-commit ledger in MinIO, ledger object
writes per delivery, and the ledger's ceiling, side by side in one run.

    aldebaran bench dispatch --alerts 50000

Per channel (webhook one alert per request, webhook batched, Kafka bus, SMS, the log file), a backlog
of alerts (+10 % repeats of the same ids) is put on a fresh alerts topic, then a streaming dispatcher
process (``aldebaran dispatch --follow``, as dispatch_supervisor runs it) drains it into a real recipient:
a receiver in a process of its own (aldebaran_capacity.receivers), for the bus a Kafka topic read back by
the bench, for the log channel its file read back by the bench (receipt time = the line's ``sent_at``).
The operations channels go to their receivers too: a real Alertmanager (its own process, read back through
its API), and the fakes of PagerDuty, Opsgenie, FCM and APNs (the providers' published contracts, with no
rate limit: the figure is ours, not the provider's), which run in the bench's process, apart from the
dispatcher's. Push (fcm, apns) cannot deduplicate, so like SMS it gets the small count (``sms_alerts``).
Nothing else shares the dispatcher's process (its GIL). Figures:

- deliveries/s: unique alerts received at the recipient ÷ (last receipt − first receipt), the
  sustained rate; ``deliveries_eps_incl_start`` divides by (last receipt − dispatcher start), which
  also counts joining the consumer group (~3 s here) and the first ledger reads;
- ledger writes per delivery: object writes the ledger made (claims, records, owner epochs, failure
  records) ÷ deliveries;
- correctness: every alert received exactly once (no missing, no second receipt);
- the ledger ceiling: claim + record pairs per second for runs of the measured size (two conditional
  PUTs of the real run body, boto3, the same concurrency), i.e. what MinIO allows; × run size = the
  deliveries/s the object store would allow.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
import uuid

log = logging.getLogger(__name__)

# The core channels need nothing beyond the platform for their recipients; the operations channels need an
# Alertmanager binary (setup builds it) and the providers' fakes.
CORE_CHANNELS = ("webhook", "webhook_batch", "bus", "sms", "log")
# The fast lane's cross-lane designs (issue 38 item 1), side by side: a batched webhook with "fast": true drained
# by ``aldebaran dispatch --fast --follow`` from a fresh fast topic, under ALDEBARAN_DELIVERY_CROSS_LANE=<design>
# (markers: a sent marker per alert, today's default; log: a claim log per partition, one write per run).
FAST_KINDS = {"fast_markers": "markers", "fast_log": "log"}
CHANNELS = (*CORE_CHANNELS, "alertmanager", "pagerduty", "opsgenie", "fcm", "apns", *FAST_KINDS)
# Channels that cannot deduplicate: a sent marker per alert in the ledger, runs of one send window (the small count).
IN_DOUBT_KINDS = ("sms", "fcm", "apns")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[k]


def make_alerts(n: int, tag: str) -> list[dict]:
    now = int(time.time() * 1000)
    return [{"alert_id": f"{tag}{i:024x}", "kind": "OVERFILL", "order_id": f"{tag}-{i}", "client": "Sendence",
             "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 3,
             "trigger_event_id": f"{tag}-{i}-p3", "trigger_event_ts": now, "detected_at": now} for i in range(n)]


def ledger_ceiling(run_size: int, pairs: int = 200, concurrency: int = 8) -> dict:
    """Claim + record pairs per second for run objects holding `run_size` alerts (no channel, no Kafka)."""
    from concurrent.futures import ThreadPoolExecutor

    from types import SimpleNamespace

    from aldebaran.delivery.channels.base import Outcome
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.model import Alert
    from aldebaran.storage.store import S3Store

    store = S3Store()
    tag = uuid.uuid4().hex[:8]
    ledger = Ledger(store, prefix=f"bench/{tag}/ceiling")
    receipt = {"status": 201, "response_id": uuid.uuid4().hex, "elapsed_ms": 1.2}
    channel = SimpleNamespace(name="webhook", can_dedupe=True)
    alerts = [Alert(f"{k:032x}", "OVERFILL", f"o-{k}") for k in range(run_size)]  # the same ids in every run
    delivered = [Outcome.delivered(a.alert_id, receipt) for a in alerts]

    def pair(i: int) -> None:
        first = i * run_size
        buffer = [(first + k, None, a, None) for k, a in enumerate(alerts)]
        run = ledger.open_run(channel, "alerts", 0, 1, "bench", buffer, run_size, look=False)  # the claim
        run.report({first + k: o for k, o in enumerate(delivered)})  # the record

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(pair, range(pairs)))
    elapsed = time.monotonic() - t0
    store.delete_prefix(f"bench/{tag}/")
    return {"run_size": run_size, "pairs": pairs, "concurrency": concurrency, "seconds": round(elapsed, 3),
            "runs_per_s": pairs / elapsed, "conditional_puts_per_s": 2 * pairs / elapsed,
            "deliveries_per_s": pairs * run_size / elapsed}


class BusReader:
    """Reads the bus channel's topic back: first receipt time per alert id (the broker's timestamp) and repeats."""

    def __init__(self, kafka, topic: str) -> None:
        self.kafka, self.topic = kafka, topic
        self.received_at: dict[str, float] = {}
        self.duplicates = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bus-reader", daemon=True)

    def start(self) -> "BusReader":
        self._thread.start()
        return self

    def _run(self) -> None:
        from aldebaran.kafka.io import consumer

        c = consumer(self.kafka, f"bench-bus-{uuid.uuid4().hex[:8]}", **{"auto.offset.reset": "earliest"})
        c.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                for msg in c.consume(num_messages=10_000, timeout=0.2):
                    if msg.error():
                        continue
                    key = msg.key().decode()
                    if key in self.received_at:
                        self.duplicates += 1
                    else:
                        self.received_at[key] = msg.timestamp()[1] / 1000
        finally:
            c.close()

    def stats(self, summary: bool = True) -> dict:
        return {"received": len(self.received_at), "duplicates": self.duplicates, "received_at": self.received_at}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class LogFileReader:
    """Reads the log channel's file back: first ``sent_at`` per idempotency key, and keys written twice."""

    def __init__(self, path) -> None:
        self.path = path
        self.received_at: dict[str, float] = {}
        self.duplicates = 0
        self._pos = 0

    def stats(self, summary: bool = True) -> dict:
        if self.path.exists():
            with open(self.path, "rb") as fh:
                fh.seek(self._pos)
                data = fh.read()
            complete = data.rfind(b"\n") + 1  # a line still being written is read next time
            for line in data[:complete].splitlines():
                line = json.loads(line)
                if line["idempotency_key"] in self.received_at:
                    self.duplicates += 1
                else:
                    self.received_at[line["idempotency_key"]] = line["sent_at"]
            self._pos += complete
        return {"received": len(self.received_at), "duplicates": self.duplicates, "received_at": self.received_at}


def _recipient(kind: str, kafka, tag: str):
    """(recipient with .stats() → {received, duplicates, received_at}, connection JSON for the channel, stop)."""
    if kind == "bus":
        from aldebaran.kafka import admin as kadmin

        topic = f"bench-{tag}-bus"
        kadmin.ensure_topics(kafka, [topic], partitions=2)
        reader = BusReader(kafka, topic).start()
        conn = {"conn_type": "kafka", "extra": {"topic": topic, "bootstrap.servers": kafka.bootstrap_servers,
                                                "linger.ms": 5}}
        return reader, conn, lambda: (reader.stop(), kadmin.delete_topics(kafka, [topic]))
    if kind == "log":
        from aldebaran.runtime import paths

        path = paths.run_dir() / "bench" / f"dispatch-{tag}.alerts.log.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        return LogFileReader(path), {"conn_type": "log", "extra": {"path": str(path)}}, lambda: path.unlink(missing_ok=True)
    if kind in OPERATIONS_KINDS:
        return _operations_recipient(kind, tag)
    from aldebaran_capacity.receivers import ReceiverProcess

    if kind in FAST_KINDS:  # a batched webhook that opted in to the fast lane
        proc = ReceiverProcess("webhook").start()
        return proc, {"conn_type": "http", "host": proc.url, "password": proc.secret,
                      "extra": {"endpoint": "/alerts", "batch": 100, "fast": True}}, proc.stop
    proc = ReceiverProcess("sms" if kind == "sms" else "webhook").start()
    if kind == "sms":
        conn = {"conn_type": "sms", "host": proc.url, "login": proc.account_sid, "password": proc.auth_token,
                "extra": {"from": "+15550001111", "to": "+15552223333", "lookup": True}}
    else:
        conn = {"conn_type": "http", "host": proc.url, "password": proc.secret,
                "extra": {"endpoint": "/alerts", "batch": 100 if kind == "webhook_batch" else 1}}
    return proc, conn, proc.stop


OPERATIONS_KINDS = ("alertmanager", "pagerduty", "opsgenie", "fcm", "apns")


def _operations_recipient(kind: str, tag: str):
    """The operations channels' recipients (module docstring), as :func:`_recipient` returns them."""
    from aldebaran.runtime import paths
    from aldebaran_capacity import receivers

    home = paths.run_dir() / "bench" / f"dispatch-{tag}-{kind}"
    if kind == "alertmanager":
        am = receivers.AlertmanagerProcess(home).start()
        return am, {"conn_type": "alertmanager", "host": am.url}, am.stop
    if kind == "pagerduty":
        fake = receivers.FakePagerDuty().start()
        conn = {"conn_type": "pagerduty", "host": fake.url, "password": fake.routing_key}
    elif kind == "opsgenie":
        fake = receivers.FakeOpsgenie().start()
        conn = {"conn_type": "opsgenie", "host": fake.url, "password": fake.api_key}
    elif kind == "fcm":
        fake = receivers.FakeFcm().start()
        conn = {"conn_type": "fcm", "host": fake.url, "password": json.dumps(fake.service_account()),
                "extra": {"token": "bench-device"}}
    else:
        cert = receivers.self_signed_cert(home)
        fake = receivers.FakeApns(cert).start()
        conn = {"conn_type": "apns", "host": fake.url, "login": fake.key_id, "password": fake.signing_key(),
                "extra": {"team_id": fake.team_id, "topic": fake.topic, "device_token": fake.device_token,
                          "verify": str(cert[0])}}
    return fake, conn, fake.stop


def channel_run(kind: str, alerts: int, duplicates: float = 0.1, timeout: float = 600.0,
                settings_overrides: dict | None = None) -> dict:
    """Drain `alerts` (+ repeats) into one channel of `kind` through a streaming dispatcher process
    (``aldebaran dispatch --follow``, as dispatch_supervisor starts it); deliveries/s, ledger writes per
    delivery (from its final heartbeat), exactly-once at the recipient."""
    import os
    import signal
    import subprocess
    import sys

    from aldebaran.runtime import paths
    from aldebaran.runtime import heartbeat
    from aldebaran.kafka import admin as kadmin, io as kio
    from aldebaran.settings import KafkaSettings, load
    from aldebaran.storage.store import S3Store

    tag = uuid.uuid4().hex[:8]
    design = FAST_KINDS.get(kind)  # None: the exact lane's dispatcher over the alerts topic
    kafka = load(KafkaSettings, alerts_topic=f"bench-{tag}-alerts", fast_alerts_topic=f"bench-{tag}-fast")
    # Both topics alike (the claim log refuses a fast topic partitioned unlike the alerts topic).
    kadmin.ensure_topics(kafka, [kafka.alerts_topic, kafka.fast_alerts_topic] if design else [kafka.alerts_topic])
    topic = kafka.fast_alerts_topic if design else kafka.alerts_topic
    batch = make_alerts(alerts, tag)
    repeats = batch[: int(alerts * duplicates)]
    kio.produce_all(kio.producer(kafka), topic,
                         [(a["alert_id"], json.dumps(a, separators=(",", ":"))) for a in batch + repeats])
    store = S3Store()
    recipient, conn, stop_recipient = _recipient(kind, kafka, tag)
    name, dispatcher_name = kind.replace("_", ""), f"bench-{tag}"
    env = {**os.environ, "ALDEBARAN_CHANNELS": name, f"AIRFLOW_CONN_ALDEBARAN_{name.upper()}": json.dumps(conn),
           "ALDEBARAN_DELIVERY_PREFIX": f"bench/{tag}/deliveries", "ALDEBARAN_KAFKA_ALERTS_TOPIC": kafka.alerts_topic,
           "ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS": "1", "ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC": kafka.fast_alerts_topic,
           **({"ALDEBARAN_DELIVERY_CROSS_LANE": design} if design else {}),
           **{f"ALDEBARAN_DELIVERY_{k.upper()}": str(v) for k, v in (settings_overrides or {}).items()}}
    log_path = paths.run_dir() / "bench" / f"dispatch-{tag}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "aldebaran.cli.main", "dispatch", *(["--fast"] if design else []),
                                 "--follow", "--channel", name,
                                 "--name", dispatcher_name], env=env, stdout=log_file, stderr=subprocess.STDOUT)
    beat: dict = {}
    try:
        deadline = time.monotonic() + timeout
        got = recipient.stats()
        while got["received"] < alerts and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            got = recipient.stats()
        time.sleep(1.0)  # let late repeats (which must not come) show up
        got = recipient.stats(summary=False)  # with the first receipt time of every alert
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        beat = heartbeat.read(store, heartbeat.DISPATCHER, dispatcher_name) or {}
        stop_recipient()
        kadmin.delete_topics(kafka, [kafka.alerts_topic, kafka.fast_alerts_topic])
        store.delete_prefix(f"bench/{tag}/")
        store.delete(heartbeat.key(heartbeat.DISPATCHER, dispatcher_name))
    received_at = got.get("received_at") or {}
    last = max(received_at.values()) if received_at else time.time()
    first = min(received_at.values()) if received_at else t0
    elapsed = max(1e-6, last - first)
    unique = got["received"]
    writes = beat.get("ledger_writes")
    result = {
        "channel": kind, "cross_lane": design, "alerts": alerts, "repeats_on_topic": len(repeats), "received": unique,
        "received_twice": got.get("duplicates", 0), "missing": alerts - unique, "seconds": round(elapsed, 3),
        "deliveries_eps": unique / elapsed, "deliveries_eps_incl_start": unique / max(1e-6, last - t0),
        "runs": beat.get("runs"), "ledger_writes": writes,
        "ledger_writes_per_delivery": (writes / max(1, unique)) if writes is not None else None,
        "dispatcher_exit": proc.returncode, "dispatcher_log": str(log_path),
        "correct": unique == alerts and got.get("duplicates", 0) == 0 and proc.returncode == 0,
    }
    log.info("dispatch %s: %d alerts in %.1fs = %.0f deliveries/s, %s ledger writes/delivery, correct=%s",
             kind, unique, elapsed, result["deliveries_eps"], result["ledger_writes_per_delivery"], result["correct"])
    if result["correct"]:
        log_path.unlink(missing_ok=True)
    return result


def run(alerts: int = 50_000, sms_alerts: int = 500, repeats: int = 1, channels: tuple[str, ...] = CHANNELS,
        **_ignored) -> dict:
    """Every channel (median of `repeats`), the ledger ceiling at the webhook's run size, in one run. The fast
    dispatcher's paced latency (``dispatch.fast.paced``) is aldebaran_capacity.bench.fast_paced.add_to's."""
    out: dict = {"alerts": alerts, "sms_alerts": sms_alerts, "repeats": repeats, "channels": {}}
    runs_by_channel: dict[str, list[dict]] = {}
    for _ in range(repeats):  # interleaved: each channel (each fast design) once per round, side by side in time
        for kind in channels:
            runs_by_channel.setdefault(kind, []).append(channel_run(kind, sms_alerts if kind in IN_DOUBT_KINDS else alerts))
    for kind in channels:
        ordered = sorted(runs_by_channel[kind], key=lambda r: r["deliveries_eps"])
        med = ordered[len(ordered) // 2]
        out["channels"][kind] = {**med, "runs_eps": [round(r["deliveries_eps"]) for r in runs_by_channel[kind]],
                                 "correct": all(r["correct"] for r in runs_by_channel[kind])}
    fast = {FAST_KINDS[k]: c for k, c in out["channels"].items() if k in FAST_KINDS}
    if fast:
        out["fast"] = fast_summary(fast)
    # The fast designs have their own figure (a candidate's markers must not stand for the platform's writes).
    dedupe = [c for k, c in out["channels"].items() if k not in IN_DOUBT_KINDS and k not in FAST_KINDS]
    out["ledger_writes_per_delivery"] = max((c["ledger_writes_per_delivery"] or 0 for c in dedupe), default=None)
    run_size = max(1, round(statistics.mean([c["alerts"] / max(1, c["runs"] or 1) for c in dedupe]))) if dedupe else 1
    out["ledger_ceiling"] = ledger_ceiling(run_size)
    for c in out["channels"].values():
        c["ratio_to_ledger_ceiling"] = c["deliveries_eps"] / out["ledger_ceiling"]["deliveries_per_s"]
    out["all_correct"] = all(c["correct"] for c in out["channels"].values())
    return out


def fast_summary(designs: dict[str, dict]) -> dict:
    """``dispatch.fast``: the cheapest correct cross-lane design's figures (fewest ledger writes per delivery,
    then the most deliveries/s), and every design measured beside it."""
    ok = [(d, c) for d, c in designs.items() if c["correct"] and c["ledger_writes_per_delivery"] is not None]
    best = min(ok, key=lambda dc: (dc[1]["ledger_writes_per_delivery"], -dc[1]["deliveries_eps"]), default=None)
    return {"design": best[0] if best else None,
            "deliveries_eps": best[1]["deliveries_eps"] if best else None,
            "ledger_writes_per_delivery": best[1]["ledger_writes_per_delivery"] if best else None,
            "designs": {d: {"deliveries_eps": c["deliveries_eps"], "ledger_writes_per_delivery":
                            c["ledger_writes_per_delivery"], "runs_eps": c.get("runs_eps"), "correct": c["correct"]}
                        for d, c in designs.items()}}
