"""The deployed-path bench's parts (aldebaran_lab.deployed runs them): the paced producer (its own process:
``python -m aldebaran_lab.deployed_parts produce ...``), the watcher of the auditor's batches and the
heartbeats' pids, the bench's channels configured through Airflow, and one measured segment. The runs, the
capacity ladder and the lane (deployed_runs, deployed_capacity, deployed_lane) import from here, never from
aldebaran_lab.deployed, so the imports run one way."""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import sys
import threading
import time
import uuid

from aldebaran.exceptions import AldebaranError
from aldebaran_capacity.bench.boxstate import BoxSampler, platform_role
from aldebaran_capacity.taps import LogTap, TopicTap

log = logging.getLogger(__name__)

DEFAULT_RATES = (1000, 5000, 10000, 20000)
CHANNELS = ("log", "webhook", "bus")
BUS_TOPIC = "alerts.bench-bus"
CHANNELS_VARIABLE = "aldebaran_channels"
WARMUP = (200, 5.0)  # events/s, seconds: the first batches after a quiet spell, left out


class DeployedError(AldebaranError):
    """The deployed-path bench cannot run (platform not running, channels not started)."""


# --- the producer (its own process: `python -m aldebaran_lab.deployed_parts produce ...`) ------------------
def produce(bootstrap: str, topic: str, rate: float, seconds: float, prefix: str, mix: str = "one-alert",
            seed: int = 0) -> dict:
    """Paced orders of `mix` (aldebaran_lab.deployed_capacity.order_values) from a plain confluent-kafka
    Producer (defaults), keyed by order id; returns what was sent."""
    from confluent_kafka import Producer

    from aldebaran_lab.deployed_mixes import order_count, orders_of

    p = Producer({"bootstrap.servers": bootstrap})
    orders = order_count(mix, rate, seconds)
    errors = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    t0, n = time.monotonic(), 0
    for oid, values in orders_of(mix, prefix, orders, seed):
        for value in values:
            while True:
                try:
                    p.produce(topic, key=oid, value=json.dumps(value), on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.01)
            n += 1
        p.poll(0)
        ahead = n / rate - (time.monotonic() - t0)
        if ahead > 0.001:
            time.sleep(ahead)
    sent_s = time.monotonic() - t0
    left = p.flush(60)
    return {"orders": orders, "events": n, "seconds": round(sent_s, 3), "undelivered": left, "errors": errors[:3]}


def produce_in_process(kafka, rate: float, seconds: float, prefix: str, mix: str = "one-alert",
                       seed: int = 0) -> dict:
    cmd = [sys.executable, "-m", "aldebaran_lab.deployed_parts", "produce", kafka.bootstrap_servers, kafka.trades_topic,
           str(rate), str(seconds), prefix, mix, str(seed)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 3 + 120)
    if out.returncode != 0:
        raise DeployedError(f"the paced producer failed ({out.returncode}): {out.stderr[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


_produce_in_process = produce_in_process  # the name it had


# --- the platform -------------------------------------------------------------------------------------
class Watcher(threading.Thread):
    """Every second: the auditor's batches (from its heartbeat) and the pids behind the heartbeats."""

    def __init__(self, query: str, dispatchers: list[str]) -> None:
        from aldebaran.storage.store import open_store
        from aldebaran.platform import dispatch_supervisor

        super().__init__(daemon=True, name="deployed-watcher")
        self.query, self.dispatchers = query, dispatchers
        self.store, self.dstore = open_store(), dispatch_supervisor.delivery_store()
        self._done = threading.Event()
        self.batches: dict[int, dict] = {}
        self.pids: dict[str, list[int]] = {}

    def _pid(self, who: str, hb: dict | None) -> None:
        pid = (hb or {}).get("pid")
        seen = self.pids.setdefault(who, [])
        if pid is not None and (not seen or seen[-1] != pid):
            seen.append(pid)

    def sample(self) -> None:
        from aldebaran.runtime import heartbeat

        hb = heartbeat.read(self.store, heartbeat.AUDITOR, self.query)
        self._pid("auditor", hb)
        books = (hb or {}).get("books") or {}
        if books.get("batch_id") is not None:
            spark = hb.get("duration_ms") or {}
            self.batches[books["batch_id"]] = {"batch_ms": books.get("batch_ms"), "steps_ms": books.get("steps_ms"),
                                               "applied": books.get("applied"), "misrouted": books.get("misrouted"),
                                               "task_input_ms": books.get("task_input_ms_max"),
                                               "task_host_ms": books.get("task_host_ms_max"),
                                               "trigger_ms": spark.get("triggerExecution"), "spark_ms": spark}
        for name in self.dispatchers:
            self._pid(f"dispatcher {name}", heartbeat.read(self.dstore, heartbeat.DISPATCHER, name))

    def run(self) -> None:
        while not self._done.wait(1.0):
            try:
                self.sample()
            except AldebaranError as exc:
                log.debug("watcher: %s", exc)

    def stop(self) -> None:
        self._done.set()
        self.join(10)

    def restarts(self) -> dict[str, int]:
        return {who: len(pids) - 1 for who, pids in self.pids.items() if len(pids) > 1}


def auditor_running(query: str, max_age: float = 60.0) -> bool:
    from aldebaran.runtime import heartbeat
    from aldebaran.storage.store import open_store

    hb = heartbeat.read(open_store(), heartbeat.AUDITOR, query)
    return bool(hb) and hb.get("status") in ("running", "idle") and time.time() - hb.get("updated_at_ms", 0) / 1000 < max_age


class Channels:
    """log, webhook and bus on the running platform, configured through Airflow, and taken away after."""

    def __init__(self, api, kafka, webhook_batch: int = 1, fast_webhook: bool = False) -> None:
        self.api, self.kafka = api, kafka
        self.webhook_batch = webhook_batch
        # The webhook opted in to the fast lane ("fast": true): the supervised fast dispatcher delivers the lane's
        # copy, the exact one finds it held (issue 38's deployed configuration). Needs ALDEBARAN_LANES_ENABLED.
        self.fast_webhook = fast_webhook
        self.receiver = None

    def __enter__(self) -> "Channels":
        from aldebaran.kafka import admin as kadmin
        from aldebaran_capacity.receivers.process import ReceiverProcess

        from aldebaran.delivery.settings import DeliverySettings
        from aldebaran.settings import load

        # The bench's webhook and bus channels are new to `alerts`: their dispatchers start at its end, not at
        # the alerts of earlier runs (a stale group delivered the whole history and left the 11-28 run's
        # webhook column empty).
        group = load(DeliverySettings).group
        for name in ("webhook", "bus"):
            kadmin.commit_at_end(self.kafka, f"{group}-{name}", self.kafka.alerts_topic)
        if self.fast_webhook:  # likewise on the fast topic: not the lane's earlier alerts
            from aldebaran.delivery.fast import GROUP_SUFFIX

            kadmin.commit_at_end(self.kafka, f"{group}-webhook{GROUP_SUFFIX}", self.kafka.fast_alerts_topic)
        secret = secrets.token_urlsafe(24)
        self.receiver = ReceiverProcess("webhook", secret=secret).start()
        kadmin.ensure_topics(self.kafka, [BUS_TOPIC])
        # host with a scheme is the base URL (the HTTP provider's rule, connection.base_url)
        extra = {**({"batch": self.webhook_batch} if self.webhook_batch > 1 else {}),
                 **({"fast": True} if self.fast_webhook else {})}
        self.api.set_connection("aldebaran_webhook", "http", host=self.receiver.url, password=secret,
                                extra=extra or None)
        self.api.set_connection("aldebaran_bus", "kafka", extra={"topic": BUS_TOPIC,
                                                                 "bootstrap.servers": self.kafka.bootstrap_servers})
        self.api.set_variable(CHANNELS_VARIABLE, ",".join(CHANNELS))
        return self

    def __exit__(self, *exc) -> None:
        from contextlib import ExitStack

        from aldebaran.platform import dispatch_supervisor

        # Every step runs even when one before it fails (ExitStack raises the error at the end): a bench
        # dispatcher left running joins the consumer groups of whatever platform next uses these ports (one
        # kept a CI run's capacity test waiting 17 minutes). The callbacks run last in, first out; the
        # supervisor keeps what is configured, so the Variable goes first, then the two dispatchers.
        with ExitStack() as stack:
            if self.receiver is not None:
                stack.callback(self.receiver.stop)
            for conn in ("aldebaran_bus", "aldebaran_webhook"):
                stack.callback(self.api.delete_connection, conn)
            cfg, store = dispatch_supervisor.settings(), dispatch_supervisor.delivery_store()
            for name in ("bus", "webhook", *self._fast()):
                stack.callback(dispatch_supervisor.stop, store, name, cfg, "bench deployed: done")
            stack.callback(self.api.delete_variable, CHANNELS_VARIABLE)

    def _fast(self) -> tuple[str, ...]:
        """The fast dispatcher's name, if the webhook is fast."""
        from aldebaran.delivery.fast import DISPATCHER_NAME

        return (DISPATCHER_NAME,) if self.fast_webhook else ()

    def wait_dispatchers(self, timeout: float = 240.0) -> None:
        """Trigger dispatch_supervisor until a running dispatcher of each channel (and with a fast webhook, the
        fast dispatcher) owns its partitions."""
        from aldebaran.runtime import heartbeat
        from aldebaran.platform import dispatch_supervisor

        store = dispatch_supervisor.delivery_store()
        deadline, triggered = time.monotonic() + timeout, 0.0
        while True:
            ready = {}
            for name in (*CHANNELS, *self._fast()):
                hb = heartbeat.read(store, heartbeat.DISPATCHER, name) or {}
                parts = (hb.get("partitions") or {}).get("webhook" if name in self._fast() else name) or {}
                ready[name] = hb.get("status") == "running" and bool(parts)
            if all(ready.values()):
                return
            if time.monotonic() > deadline:
                hint = (" — the fast dispatcher starts only where Airflow runs with ALDEBARAN_LANES_ENABLED=true"
                        if self.fast_webhook and not ready.get(self._fast()[0]) else "")
                raise DeployedError(f"dispatchers not running after {timeout:.0f}s: {ready} (dispatch_supervisor's "
                                    f"task log says why){hint}")
            if time.monotonic() - triggered > 60:
                self.api.trigger("dispatch_supervisor")
                triggered = time.monotonic()
            time.sleep(2.0)


# --- one segment ----------------------------------------------------------------------------------------
def segment(kafka, receiver, log_path, query: str, rate: int, seconds: float, drain_s: float,
            extra_topics: dict[str, str] | None = None) -> dict:
    """One segment of paced one-alert orders, read by the taps; `extra_topics` ({name: topic}, e.g. the fast
    lane's) are read as well, their figures under ``extra.<name>`` (deployed_figures.tap_figures)."""
    from aldebaran_lab.deployed_figures import figures, tap_figures

    prefix = f"dep{uuid.uuid4().hex[:6]}r{rate}"

    def keep(order_id) -> bool:
        return isinstance(order_id, str) and order_id.startswith(prefix + "-")

    taps = {"alerts": TopicTap(kafka, kafka.alerts_topic, keep), "log": LogTap(log_path, keep),
            "bus": TopicTap(kafka, BUS_TOPIC, keep)}
    extra = {name: TopicTap(kafka, topic, keep) for name, topic in (extra_topics or {}).items()}
    watcher, box = Watcher(query, list(CHANNELS)), BoxSampler(classify=platform_role)
    for t in (*taps.values(), *extra.values(), watcher, box):
        t.start()
    watcher.sample()
    t0 = time.time() * 1000
    try:
        sent = produce_in_process(kafka, rate, seconds, prefix)
        box_state = box.stop()  # the load segment only, not the drain
        want = sent["orders"]
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            hook = receiver.stats(summary=True)
            if all(len(t.seen) >= want for t in (*taps.values(), *extra.values())) and hook.get("received", 0) >= want:
                break
            time.sleep(1.0)
    finally:
        for t in (*taps.values(), *extra.values(), watcher):
            t.stop()
    webhook = {a: at * 1000 for a, at in (receiver.stats(summary=False).get("received_at") or {}).items()}
    seg = figures(rate, sent, t0, taps, webhook, keep_ids=set(taps["alerts"].seen), watcher=watcher, box=box_state)
    if extra:
        seg["extra"] = {name: tap_figures(tap, sent["orders"]) for name, tap in extra.items()}
    return seg


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "produce":
    bootstrap, topic, rate, secs, pfx = sys.argv[2:7]
    mix_name, mix_seed = (sys.argv[7:9] + ["one-alert", "0"][len(sys.argv[7:9]):])
    print(json.dumps(produce(bootstrap, topic, float(rate), float(secs), pfx, mix_name, int(mix_seed))))
