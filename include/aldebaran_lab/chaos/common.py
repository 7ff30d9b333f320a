"""Shared parts of the campaigns: a workspace (own topics, object-store prefix, checkpoint), the auditor
as a killable subprocess, its progress read from the Spark checkpoint, the comparison of alerts with
the reference model, and the result tables written into docs/reliability.md."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Hashable, Iterable, Iterator, Mapping, Sequence

from aldebaran.audit import reference
from aldebaran.runtime import paths
from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.delivery.channels import sms_text
from aldebaran.delivery.records import DELIVERED, IN_DOUBT
from aldebaran.exceptions import AldebaranError, NotFound, ObjectStoreError
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.model import Alert
from aldebaran.settings import KafkaSettings, load
from aldebaran.storage.store import S3Store
from aldebaran_lab.chaos import receipts

log = logging.getLogger(__name__)

TOPIC_ENV = {
    "trades_topic": "ALDEBARAN_KAFKA_TRADES_TOPIC",
    "alerts_topic": "ALDEBARAN_KAFKA_ALERTS_TOPIC",
    "dlq_topic": "ALDEBARAN_KAFKA_DLQ_TOPIC",
    "alerts_dlq_topic": "ALDEBARAN_KAFKA_ALERTS_DLQ_TOPIC",
}


class ChaosError(AldebaranError):
    """A campaign could not run (not: a campaign found a problem — that is in its result)."""


# --- workspace ------------------------------------------------------------------------------------
@dataclass
class Workspace:
    """One campaign's own topics, object-store prefix and checkpoint; never shared with anyone."""

    name: str
    kafka: KafkaSettings
    store: S3Store
    prefix: str
    checkpoint: str
    logs: Path

    @classmethod
    def create(cls, campaign: str, s3a: bool = True, kafka: KafkaSettings | None = None,
               store: S3Store | None = None) -> "Workspace":
        tag = f"{campaign}-{uuid.uuid4().hex[:8]}"
        base = kafka or load(KafkaSettings)
        topics = {"trades_topic": f"chaos-{tag}-trades", "alerts_topic": f"chaos-{tag}-alerts",
                  "dlq_topic": f"chaos-{tag}-dlq", "alerts_dlq_topic": f"chaos-{tag}-alerts-dlq"}
        settings = base.model_copy(update=topics)
        kadmin.ensure_topics(settings)
        store = store or S3Store()
        store.ensure_bucket()
        prefix = f"chaos/{tag}"
        logs = paths.run_dir() / "chaos" / tag
        logs.mkdir(parents=True, exist_ok=True)
        checkpoint = f"s3a://{store.bucket}/{prefix}/checkpoint" if s3a else str(logs / "checkpoint")
        log.info("chaos %s: topics %s, prefix %s, checkpoint %s, logs %s", campaign,
                 settings.trades_topic, store.uri(prefix), checkpoint, logs)
        return cls(tag, settings, store, prefix, checkpoint, logs)

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a subprocess (auditor, dispatch worker) that works on this workspace."""
        env = dict(os.environ)
        for fld, var in TOPIC_ENV.items():
            env[var] = getattr(self.kafka, fld)
        env["ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS"] = self.kafka.bootstrap_servers
        env.update(extra)
        return env

    def cleanup(self) -> None:
        from aldebaran.runtime.heartbeat import AUDITOR, key

        # alerts.dlq is not among topics(): its first writer creates it (aldebaran.delivery.decode).
        kadmin.delete_topics(self.kafka, [*self.kafka.topics(), self.kafka.alerts_dlq_topic])
        self.store.delete_prefix(self.prefix + "/")
        self.store.delete(key(AUDITOR, self.name))


@contextlib.contextmanager
def topic_env(kafka: KafkaSettings) -> Iterator[None]:
    """Point this process's ALDEBARAN_KAFKA_* at a workspace while in-process code (job.run) loads them."""
    saved = {var: os.environ.get(var) for var in [*TOPIC_ENV.values(), "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS"]}
    for fld, var in TOPIC_ENV.items():
        os.environ[var] = getattr(kafka, fld)
    os.environ["ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS"] = kafka.bootstrap_servers
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


# --- the auditor as a subprocess ------------------------------------------------------------------
class AuditorProcess:
    """`aldebaran auditor run ...` in its own process group (driver + Spark JVM), killable as a whole."""

    def __init__(self, env: dict[str, str], args: list[str], log_path: Path) -> None:
        self.env = env
        self.args = args
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== start {self.starts} at {dt.datetime.now(dt.UTC).isoformat()} ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [str(paths.venv_bin("aldebaran")), "auditor", "run", *self.args],
                env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log.info("auditor started (pid %d, start %d)", self.proc.pid, self.starts)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL the driver and everything it started (the Spark JVM): a crashed host, not a stop."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        _reap_group(self.proc.pid)

    def stop(self, timeout: float = 90.0) -> int | None:
        """A clean stop: SIGINT to the driver (it stops the query and detaches), SIGKILL if it hangs."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("auditor did not stop within %.0fs after SIGINT; SIGKILL", timeout)
                self.kill()
        _reap_group(self.proc.pid)
        return self.proc.returncode

    def tail(self, lines: int = 30) -> str:
        from aldebaran_lab.services.base import tail

        return tail(self.log_path, lines)


def _reap_group(pgid: int) -> None:
    """Whatever of the group outlived its leader (a JVM) goes too: we started it."""
    from aldebaran_lab.services.base import Service

    deadline = time.monotonic() + 10
    while Service._group_alive(pgid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.2)


def auditor_args(ws: Workspace, *, rules: str = "overfill", max_offsets: int = 20_000, ttl_seconds: float = 86_400,
                 trigger: str = "processing-time", extra: list[str] | None = None) -> list[str]:
    return [
        "--checkpoint", ws.checkpoint, "--trigger", trigger, "--rules", rules,
        "--max-offsets-per-trigger", str(max_offsets), "--ttl-seconds", str(ttl_seconds),
        "--query-name", ws.name, "--archive-prefix", f"{ws.prefix}/archive", *(extra or []),
    ]


# --- progress from the checkpoint -------------------------------------------------------------------
def _checkpoint_files(ws: Workspace, sub: str) -> dict[int, str]:
    """Batch id → location of the Spark checkpoint's offsets/ or commits/ entries."""
    root = Checkpoint(ws.checkpoint).spark_log(sub)
    out: dict[int, str] = {}
    if root.startswith("s3a://"):
        key_prefix = root.split("/", 3)[3] + "/"
        for obj in ws.store.list(key_prefix):
            name = obj["Key"][len(key_prefix):]
            if name.isdigit():
                out[int(name)] = obj["Key"]
    elif Path(root).is_dir():
        for p in Path(root).iterdir():
            if p.name.isdigit():
                out[int(p.name)] = str(p)
    return out


def _read(ws: Workspace, where: str) -> str:
    if ws.checkpoint.startswith("s3a://"):
        return ws.store.get(where).body.decode()
    return Path(where).read_text()


def committed(ws: Workspace, patience: float = 300.0) -> tuple[int, dict[int, int]]:
    """(number of committed batches: the last batch id + 1, the trades topic's offsets up to which they reach). Waits out an
    object store that is briefly unreachable (a shared MinIO restarted under the campaign) for up to
    `patience` seconds."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return _committed(ws)
        except ObjectStoreError as exc:
            if isinstance(exc, NotFound) or time.monotonic() > deadline:
                raise
            log.warning("reading the checkpoint: %s; retrying", exc)
            time.sleep(2.0)


def _committed(ws: Workspace) -> tuple[int, dict[int, int]]:
    commits = _checkpoint_files(ws, "commits")
    if not commits:
        return 0, {}
    last = max(commits)  # (the count of files would stall: Spark keeps only the last 100 batches' logs)
    offsets = _checkpoint_files(ws, "offsets")
    if last not in offsets:
        return last + 1, {}
    for line in _read(ws, offsets[last]).splitlines()[2:]:
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict) and ws.kafka.trades_topic in value:
                return last + 1, {int(p): int(o) for p, o in value[ws.kafka.trades_topic].items()}
    return last + 1, {}


def caught_up(ws: Workspace, ends: dict[int, int] | None = None) -> bool:
    ends = ends if ends is not None else kio.end_offsets(ws.kafka, ws.kafka.trades_topic)
    _, done = committed(ws)
    return all(done.get(p, 0) >= end for p, end in ends.items() if end > 0)


def private_ports(airflow: bool = True) -> dict[str, int]:
    """Free ports on 127.0.0.1 for a campaign's private Kafka (broker, controller), MinIO and Airflow
    api-server (whose task and trigger log servers take api+713 and api+714, as kill_scheduler sets them),
    so that a campaign never collides with another one or with the test suite's short variants."""
    import random
    import socket

    def free(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
        return True

    rng = random.SystemRandom()
    names = ["kafka", "kafka_controller", "minio"] + (["airflow_api"] if airflow else [])
    out: dict[str, int] = {}
    while len(out) < len(names):
        port = rng.randrange(20_000, 29_000)
        need = [port] + ([port + 713, port + 714] if names[len(out)] == "airflow_api" else [])
        if all(free(p) for p in need) and not set(need) & set(out.values()):
            out[names[len(out)]] = port
    return out


def wait_for(check, timeout: float, interval: float = 1.0, what: str = "condition", on_tick=None) -> float:
    """Poll `check` until truthy; returns the seconds it took. Raises ChaosError after `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if check():
                return time.monotonic() - t0
        except ObjectStoreError as exc:  # a shared MinIO restarted under the campaign: ask again
            if isinstance(exc, NotFound):
                raise
            log.warning("%s: %s; retrying", what, exc)
        if on_tick:
            on_tick()
        time.sleep(interval)
    raise ChaosError(f"{what}: not reached within {timeout:.0f}s")


# --- alerts against the reference ---------------------------------------------------------------------
@dataclass
class AlertVerdict:
    expected: int
    received_raw: int
    unique: int
    duplicates_raw: int  # repeats on the (at-least-once) topic, removed by alert id as the dispatcher does
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # same id, different content

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.changed)

    def summary(self) -> dict:
        return {"expected": self.expected, "received_raw": self.received_raw, "unique": self.unique,
                "duplicates_raw": self.duplicates_raw, "missing": len(self.missing), "extra": len(self.extra),
                "changed": len(self.changed), "examples": (self.missing + self.extra + self.changed)[:5]}


def compare_alerts(received: list[dict], expected: list[dict]) -> AlertVerdict:
    """Received alerts (raw, as on the topic) against the reference's, by alert id."""
    by_id: dict[str, dict] = {}
    for a in received:
        by_id.setdefault(a["alert_id"], a)
    want = {a["alert_id"]: a for a in expected}
    if len(want) != len(expected):
        raise ChaosError("the reference expects an alert id twice (a book expired and re-opened): "
                         "run the campaign with a longer --ttl-seconds")
    changed = [i for i in want.keys() & by_id.keys() if reference.key(want[i]) != reference.key(by_id[i])]
    return AlertVerdict(
        expected=len(expected), received_raw=len(received), unique=len(by_id),
        duplicates_raw=len(received) - len(by_id),
        missing=sorted(want.keys() - by_id.keys()), extra=sorted(by_id.keys() - want.keys()), changed=sorted(changed),
    )


def topic_alerts(kafka: KafkaSettings, timeout: float = 120.0) -> list[dict]:
    return [json.loads(m.value()) for m in kio.read_topic(kafka, kafka.alerts_topic, timeout=timeout)]


# --- results ------------------------------------------------------------------------------------------
@dataclass
class CampaignResult:
    campaign: str
    mode: str  # "full" or "short"
    runs: int  # processes started (auditor or dispatch workers)
    faults: int  # faults injected
    lost: int
    duplicated: int  # alerts received more than once against the channel's promise (chaos.receipts)
    resent_same_key: int | None = None  # same-key resends its promise allows (None: no such channel)
    recovery_s: list[float] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)  # per scenario, for campaigns with several
    started: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))
    load_before: str = field(default_factory=lambda: load_average())
    load_after: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and not self.details.get("failures")

    def finish(self, t0: float) -> "CampaignResult":
        self.seconds = time.monotonic() - t0
        self.load_after = load_average()
        return self

    def aborted(self, failures: list[str], exc: Exception, t0: float) -> "CampaignResult":
        """The campaign stopped on `exc` before its verdict: what is lost is unknown (-1)."""
        failures.append(str(exc))
        self.details["failures"] = failures
        self.lost = -1
        return self.finish(t0)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def recovery_text(values: list[float]) -> str:
    if not values:
        return "–"
    values = sorted(values)
    return f"median {values[len(values) // 2]:.1f} s, max {values[-1]:.1f} s (n={len(values)})"


def markdown(result: CampaignResult, command: str) -> str:
    """The campaign's section of docs/reliability.md."""
    rows = result.rows or [{"scenario": result.campaign, "runs": result.runs, "faults": result.faults,
                            "lost": result.lost, "duplicated": result.duplicated,
                            "resent_same_key": result.resent_same_key, "recovery": recovery_text(result.recovery_s)}]
    out = [
        f"Command: `{command}` — {result.mode} mode, started {result.started}, took {result.seconds:.0f} s; "
        f"load average (1/5/15 min) before {result.load_before}, after {result.load_after} "
        "(2-core machine shared with other work: times are indicative).",
        "",
        "| scenario | runs | faults injected | lost | duplicated | resent, same key | recovery time |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        resent = receipts.cell(r.get("resent_same_key"))
        out.append(f"| {r['scenario']} | {r['runs']} | {r['faults']} | {r['lost']} | {r['duplicated']} | {resent} "
                   f"| {r['recovery']} |")
    out += ["", f"Details (every fault, its events and timings): [`img/{details_name(result)}`](img/{details_name(result)}).", ""]
    return "\n".join(out)


def details_name(result: CampaignResult) -> str:
    return f"chaos-{result.campaign}.json"


def write_report(result: CampaignResult, command: str, path: Path | None = None) -> Path:
    """Replace this campaign's section of docs/reliability.md (between its markers) with the new table; its
    details go to ``docs/img/chaos-<campaign>.json`` beside it (reliability.md holds the method and each
    campaign's latest table, and stays short: tests/unit/test_house.py)."""
    path = path or paths.ROOT / "docs" / "reliability.md"
    img = path.parent / "img"
    img.mkdir(parents=True, exist_ok=True)
    (img / details_name(result)).write_text(json.dumps({"command": command, "started": result.started,
                                                        "details": result.details}, indent=1, default=str) + "\n")
    begin, end = f"<!-- chaos:{result.campaign} -->", f"<!-- /chaos:{result.campaign} -->"
    text = path.read_text() if path.exists() else "# Reliability\n"
    section = f"{begin}\n{markdown(result, command)}{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {result.campaign}\n\n{section}\n"
    path.write_text(text)
    return path


def channel_connections(webhook, secret: str, sms=None, sms_lookup=None) -> dict[str, str]:
    """AIRFLOW_CONN_* for the campaigns' webhook (HMAC-signed with `secret`) and SMS test receivers (none
    without `sms`); with `sms_lookup` (a second SmsProvider) also channel `sms_lookup`: the same provider API
    with the connection extra ``lookup: true``, so its IN_DOUBT deliveries are settled by asking the provider."""
    def sms_conn(provider, lookup: bool) -> str:
        return json.dumps({"conn_type": "sms", "host": provider.url, "login": provider.account_sid,
                           "password": provider.auth_token,
                           "extra": {"from": "+15550001111", "to": "+15552223333", "timeout": 5, "lookup": lookup}})

    out = {
        "AIRFLOW_CONN_ALDEBARAN_WEBHOOK": json.dumps({"conn_type": "http", "host": webhook.url, "password": secret,
                                                      "extra": {"endpoint": "/alerts", "timeout": 5}}),
    }
    if sms is not None:
        out["AIRFLOW_CONN_ALDEBARAN_SMS"] = sms_conn(sms, False)
    if sms_lookup is not None:
        out["AIRFLOW_CONN_ALDEBARAN_SMS_LOOKUP"] = sms_conn(sms_lookup, True)
    return out


# --- delivery verdict (kill-dispatch, kill-scheduler, kill-triggerer, kill-api-server) -----------------
@dataclass(frozen=True)
class SmsVerdict:
    """One SMS channel (its provider cannot deduplicate; its promise allows no resend, lookup or not): a
    text sent more than once is a duplicate; an alert is lost unless its record is IN_DOUBT (for an
    operator, or for the provider's lookup) or DELIVERED with its text received by the provider."""

    channel: str
    lost: frozenset[str]
    receipts: receipts.Receipts  # per text (recipient, body): one alert's
    messages: int
    delivered: int  # records DELIVERED
    in_doubt: frozenset[str]  # records IN_DOUBT
    in_doubt_actually_sent: int  # of those, the provider did receive the text

    @property
    def sent_twice(self) -> int:
        """Texts the provider got more than once."""
        return self.receipts.duplicated

    def details(self) -> dict:
        return {"messages": self.messages, "texts_sent_twice": self.sent_twice, "delivered": self.delivered,
                "in_doubt": len(self.in_doubt), "in_doubt_actually_sent": self.in_doubt_actually_sent,
                "lost": len(self.lost), **self.receipts.figures()}

    def row(self, runs: int, faults: int, recovery: str, label: str | None = None) -> dict:
        label = label or f"{self.channel} (cannot dedupe; {len(self.in_doubt)} IN_DOUBT)"
        return {"scenario": label, "runs": runs, "faults": faults, "lost": len(self.lost),
                "duplicated": self.sent_twice, "resent_same_key": self.receipts.resent_same_key, "recovery": recovery}


def sms_verdict(alerts: Sequence[Mapping], bodies: Iterable[str], sends: Mapping[Hashable, int],
                states: Mapping[str, str], channel: str = "sms") -> SmsVerdict:
    """`bodies`: every text the provider got, `sends` its sends per text, `states` the channel's delivery
    states by alert id (no entry: no record)."""
    ids = {a["alert_id"] for a in alerts}
    by_text = {sms_text(Alert.from_dict(a)): a["alert_id"] for a in alerts}
    bodies = list(bodies)
    received = {by_text.get(b) for b in bodies}
    sms_states = {i: states.get(i) for i in ids}
    in_doubt = frozenset(i for i, s in sms_states.items() if s == IN_DOUBT)
    return SmsVerdict(
        channel=channel,
        lost=frozenset(i for i, s in sms_states.items()
                       if s not in (DELIVERED, IN_DOUBT) or (s == DELIVERED and i not in received)),
        receipts=receipts.count(sends, receipts.promise_of(channel)),
        messages=len(bodies),
        delivered=sum(s == DELIVERED for s in sms_states.values()),
        in_doubt=in_doubt,
        in_doubt_actually_sent=sum(i in received for i in in_doubt),
    )


def sms_verdict_of(alerts: Sequence[Mapping], provider, states: Mapping[str, str], channel: str) -> SmsVerdict:
    """sms_verdict from a test SmsProvider."""
    return sms_verdict(alerts, [m.body for m in provider.messages], provider.sends, states, channel)


@dataclass(frozen=True)
class DeliveryVerdict:
    """What the webhook receiver and the SMS provider got, against the alerts and their delivery states.

    Webhook (deduplicates by Idempotency-Key): an alert is lost if the receiver never accepted it or its
    state is not DELIVERED (counted once if both); its promise (at least once under a stable key) makes
    every request beyond the first per key a same-key resend, not a duplicate; a 201 beyond one per
    accepted key would be one (a copy under another key is an unexpected key, a failure).
    SMS (cannot deduplicate): a text sent more than once is a duplicate; an alert is lost unless its
    record is IN_DOUBT (for an operator) or DELIVERED with its text received by the provider."""

    lost_webhook: frozenset[str]
    webhook_delivered_twice: int  # 201 answers beyond one per accepted key
    unexpected_webhook: tuple[str, ...]  # accepted keys that are no alert of the batch, sorted
    webhook_accepted: int
    webhook_statuses: tuple[tuple[int, int], ...]  # (HTTP status, count) in the receiver's order
    webhook_receipts: receipts.Receipts  # requests per Idempotency-Key (a batch's alerts each by its id)
    webhook_bad_signatures: int
    webhook_incomplete_requests: int
    sms: SmsVerdict

    @property
    def lost_sms(self) -> frozenset[str]:
        return self.sms.lost

    @property
    def sms_sent_twice(self) -> int:
        return self.sms.sent_twice

    @property
    def sms_in_doubt(self) -> frozenset[str]:
        return self.sms.in_doubt

    @property
    def lost(self) -> int:
        return len(self.lost_webhook) + len(self.sms.lost)

    @property
    def webhook_resent_deduplicated(self) -> int:
        return self.webhook_receipts.resent_same_key

    @property
    def webhook_duplicated(self) -> int:
        return self.webhook_delivered_twice + self.webhook_receipts.duplicated

    @property
    def duplicated(self) -> int:
        return self.sms.sent_twice + self.webhook_duplicated

    @property
    def resent_same_key(self) -> int:
        """Same-key resends at the webhook (SMS allows none: a second text is a duplicate)."""
        return self.webhook_receipts.resent_same_key

    def failures(self) -> list[str]:
        return [f"{len(self.unexpected_webhook)} unexpected webhook deliveries"] if self.unexpected_webhook else []

    def details(self) -> dict:
        """The campaign details' "webhook" and "sms" entries."""
        return {
            "webhook": {"accepted": self.webhook_accepted, "statuses": dict(self.webhook_statuses),
                        "resent_same_key_deduplicated": self.webhook_resent_deduplicated,
                        "lost": len(self.lost_webhook), "bad_signatures": self.webhook_bad_signatures,
                        "incomplete_requests_dropped": self.webhook_incomplete_requests,
                        **self.webhook_receipts.figures(), "duplicated": self.webhook_duplicated},
            "sms": self.sms.details(),
        }

    def rows(self, runs: int, faults: int, recovery: str) -> list[dict]:
        """The results table's webhook and SMS rows."""
        return [
            {"scenario": "webhook (idempotent)", "runs": runs, "faults": faults, "lost": len(self.lost_webhook),
             "duplicated": self.webhook_duplicated, "resent_same_key": self.resent_same_key,
             "recovery": recovery},
            self.sms.row(runs, faults, recovery, f"sms (cannot dedupe; {len(self.sms.in_doubt)} IN_DOUBT)"),
        ]

    @classmethod
    def from_receivers(cls, alerts: Sequence[Mapping], webhook, sms,
                       states: Mapping[str, Mapping[str, str]]) -> "DeliveryVerdict":
        """From the test receivers (WebhookReceiver, SmsProvider) and the ledger's delivery states per
        channel (channel → alert id → state, as ``Ledger.states(channel)``)."""
        return delivery_verdict(
            alerts, webhook_accepted=webhook.accepted, webhook_statuses=webhook.statuses,
            webhook_requests_per_key=webhook.requests_per_key, webhook_bad_signatures=webhook.rejected_signatures,
            webhook_incomplete_requests=webhook.incomplete_requests,
            sms_bodies=[m.body for m in sms.messages], sms_sends=sms.sends, ledger_states=states,
        )


def delivery_verdict(alerts: Sequence[Mapping], *, webhook_accepted: Iterable[str],
                     webhook_statuses: Mapping[int, int], webhook_requests_per_key: Mapping[str, int],
                     webhook_bad_signatures: int, webhook_incomplete_requests: int,
                     sms_bodies: Iterable[str], sms_sends: Mapping[Hashable, int],
                     ledger_states: Mapping[str, Mapping[str, str]]) -> DeliveryVerdict:
    """The verdict for `alerts` (each sent once to channels `webhook` and `sms`): `webhook_*` the receiver's
    accepted keys (alert ids) and counts, `sms_bodies` every text the provider got and `sms_sends` its sends
    per text, `ledger_states` the delivery states, channel → alert id → state (no entry: no record)."""
    ids = {a["alert_id"] for a in alerts}
    web_states = {i: ledger_states["webhook"].get(i) for i in ids}
    accepted = set(webhook_accepted)
    return DeliveryVerdict(
        lost_webhook=frozenset((ids - accepted) | {i for i, s in web_states.items() if s != DELIVERED}),
        webhook_delivered_twice=webhook_statuses.get(201, 0) - len(accepted),
        unexpected_webhook=tuple(sorted(accepted - ids)),
        webhook_accepted=len(accepted),
        webhook_statuses=tuple(dict(webhook_statuses).items()),
        webhook_receipts=receipts.count(webhook_requests_per_key, receipts.promise_of("webhook")),
        webhook_bad_signatures=webhook_bad_signatures,
        webhook_incomplete_requests=webhook_incomplete_requests,
        sms=sms_verdict(alerts, sms_bodies, sms_sends, ledger_states["sms"]),
    )


def settled(states: Mapping[str, Mapping[str, str]], ids: Iterable[str],
            wanted: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Per channel, how many of `ids` are not yet in one of the channel's `wanted` states ({} = all settled)."""
    ids = list(ids)
    out = {}
    for channel, ok in wanted.items():
        ok = set(ok)
        open_ = sum(1 for i in ids if states.get(channel, {}).get(i) not in ok)
        if open_:
            out[channel] = open_
    return out


def unsettled(kafka: KafkaSettings, ledger, channels: Iterable[str], lookup: Iterable[str] = (),
              group: str | None = None) -> dict[str, dict]:
    """Per channel, what keeps its deliveries from being settled, found cheaply (no ledger scan): its
    consumer group's lag on the alerts topic (an offset is committed only once every alert below it is
    DELIVERED, RETRY, DEAD or IN_DOUBT), the alerts in its retry index, and for the `lookup` channels
    the IN_DOUBT ones the provider's lookup has yet to settle. {} = every channel settled; then
    ``Ledger.states`` (a scan) gives the verdict once. `group`: the dispatchers' ALDEBARAN_DELIVERY_GROUP
    (default: the product's default)."""
    from aldebaran.delivery.dispatcher import GROUP

    out = {}
    lookup = set(lookup)
    for channel in channels:
        lag = kadmin.consumer_lag(kafka, f"{group or GROUP}-{channel}", kafka.alerts_topic)
        left = {"lag": lag["lag"] if lag["committed"] else "nothing committed",
                "retry": len(ledger.indexed("retry", channel))}
        if channel in lookup:
            left["in_doubt"] = len(ledger.indexed("in_doubt", channel))
        if any(left.values()):
            out[channel] = left
    return out


def lookup_settled(ledger, channel: str, ids: Iterable[str]) -> dict[str, int]:
    """How the provider's lookup settled `channel`'s IN_DOUBT deliveries among `ids` (from the records'
    history): {"found_sent": n, "not_found_resent": m}. Reads one record per alert id that has one."""
    out = {"found_sent": 0, "not_found_resent": 0}
    for alert_id in ids:
        got = ledger.get(channel, alert_id)
        if got is None:
            continue
        for h in got[0].history:
            note = h.get("note") or ""
            if "lookup: it has the message" in note:
                out["found_sent"] += 1
            elif "lookup: no such message" in note:
                out["not_found_resent"] += 1
    return out


# --- streaming dispatchers as processes ---------------------------------------------------------------
class DispatcherProcess:
    """A streaming dispatcher — `aldebaran dispatch --follow --name NAME [--channel C ...]`, as the
    dispatch_supervisor DAG starts it — in its own process group, killable as a whole. With
    `kill_after_send` > 0 (or `stop_after_send`) it is the same dispatcher wrapped in a failure injection
    (``python -m aldebaran_lab.chaos.dispatch_worker``) that SIGKILLs itself (or freezes itself with SIGSTOP,
    once) right after a send, before the ledger records it."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path, channels: Sequence[str] = (),
                 store: S3Store | None = None) -> None:
        self.name = name
        self.env = env
        self.log_path = log_path
        self.channels = list(channels)
        self.store = store
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.started_at = 0.0

    def start(self, kill_after_send: float = 0.0, seed: int = 0, stop_after_send: bool = False) -> "DispatcherProcess":
        self.starts += 1
        chan = [a for c in self.channels for a in ("--channel", c)]
        if kill_after_send > 0 or stop_after_send:
            import sys

            cmd = [sys.executable, "-m", "aldebaran_lab.chaos.dispatch_worker", "--name", self.name, *chan,
                   "--kill-after-send", str(kill_after_send), "--seed", str(seed),
                   *(["--stop-after-send"] if stop_after_send else [])]
        else:
            cmd = [str(paths.venv_bin("aldebaran")), "dispatch", "--follow", "--name", self.name, *chan]
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== {self.name} start {self.starts} at {dt.datetime.now(dt.UTC).isoformat()} "
                      f"(kill after send: {kill_after_send}) ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True, cwd=str(paths.ROOT))
        self.started_at = time.monotonic()
        log.info("dispatcher %s started (pid %d, start %d%s)", self.name, self.proc.pid, self.starts,
                 f", kill after send p={kill_after_send}" if kill_after_send else "")
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def heartbeat(self) -> dict:
        from aldebaran.runtime.heartbeat import DISPATCHER, read

        if self.store is None:
            return {}
        try:
            return read(self.store, DISPATCHER, self.name) or {}
        except (AldebaranError, ValueError):
            return {}

    def running(self) -> bool:
        """Its heartbeat says running, written by this very process."""
        hb = self.heartbeat()
        return self.alive() and hb.get("pid") == self.pid and hb.get("status") == "running"

    def assigned(self) -> int:
        """Partitions (over all its channels) its latest heartbeat says it owns."""
        hb = self.heartbeat()
        if hb.get("pid") != self.pid:
            return 0
        return sum(len(v) for v in (hb.get("partitions") or {}).values())

    def kill(self) -> None:
        """SIGKILL the dispatcher's process group: a crashed host, not a stop."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        _reap_group(self.proc.pid)

    def frozen(self) -> bool:
        """Stopped by SIGSTOP (its own, or pause()): the state letter T of /proc/<pid>/stat (Linux)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[0] == "T"

    def pause(self) -> None:
        """SIGSTOP its process group: a frozen process (a VM pause, swapping, a starved host), heartbeats included."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (it finishes the runs in hand and commits), SIGKILL if it hangs."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("dispatcher %s did not stop within %.0fs after SIGTERM; SIGKILL", self.name, timeout)
                self.kill()
        _reap_group(self.proc.pid)
        return self.proc.returncode

    def forget(self) -> None:
        """Delete its heartbeat (the campaign's dispatchers must not look like live ones afterwards)."""
        from aldebaran.runtime.heartbeat import DISPATCHER, key

        if self.store is not None:
            with contextlib.suppress(AldebaranError):
                self.store.delete(key(DISPATCHER, self.name))

    def tail(self, lines: int = 30) -> str:
        from aldebaran_lab.services.base import tail

        return tail(self.log_path, lines)


def delivery_env(prefix: str, lease_seconds: float, **extra: str) -> dict[str, str]:
    """ALDEBARAN_DELIVERY_* for the campaigns' dispatchers: their own ledger prefix, short leases, quick
    retries, sweeps and lookups, heartbeats every second, a consumer session at the broker's minimum
    (6 s: a SIGKILLed dispatcher's partitions move on after that long), so a campaign takes minutes."""
    env = {
        "ALDEBARAN_DELIVERY_PREFIX": prefix,
        "ALDEBARAN_DELIVERY_LEASE_SECONDS": str(lease_seconds),
        "ALDEBARAN_DELIVERY_MAX_ATTEMPTS": "10",
        "ALDEBARAN_DELIVERY_BACKOFF_BASE_SECONDS": "0.2",
        "ALDEBARAN_DELIVERY_BACKOFF_MAX_SECONDS": "1.0",
        "ALDEBARAN_DELIVERY_SWEEP_SECONDS": "1.0",
        "ALDEBARAN_DELIVERY_LOOKUP_GRACE_SECONDS": "2.0",
        "ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS": "1.0",
        "ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS": "6000",
    }
    env.update(extra)
    return env


def bus_connection(bootstrap_servers: str, topic: str) -> dict:
    """The connection of a Kafka-bus channel (conn_type kafka: key = alert id, idempotent producer) onto `topic`."""
    return {"conn_type": "kafka", "extra": {"topic": topic, "bootstrap.servers": bootstrap_servers, "linger.ms": 5}}


def bus_verdict(kafka: KafkaSettings, topic: str, ids: set[str]) -> tuple[dict, dict[str, float]]:
    """The bus topic as its consumers see it (they deduplicate by the key): its receipts are the messages,
    counted per key under the bus's promise (chaos.receipts: copies under the same key are resends, a copy
    whose key is not its alert's id a duplicate); and each key's first copy (its produce time, epoch s)."""
    copies: dict[str, int] = {}
    first: dict[str, float] = {}
    mismatched = 0
    for m in kio.read_topic(kafka, topic, timeout=300):
        a = json.loads(m.value())
        key = (m.key() or b"").decode()
        if key != a.get("alert_id"):
            mismatched += 1
        copies[key] = copies.get(key, 0) + 1
        at = m.timestamp()[1] / 1000
        first[key] = min(at, first.get(key, at))
    got = set(copies)
    r = receipts.count(copies, receipts.promise_of("bus"), other_key=mismatched)
    return ({"expected": len(ids), "received": len(got & ids), "lost": len(ids - got), "duplicated": r.duplicated,
             "resent_same_key_deduplicated": r.resent_same_key, "unexpected": len(got - ids),
             "receipts": r.receipts, "resent_same_key": r.resent_same_key}, first)


def campaign_ledger(store: S3Store, prefix: str, lease_seconds: float):
    """The ledger the campaign's dispatchers write (for the verdict: ``states``, ``get``)."""
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.delivery.records import RetryPolicy

    return Ledger(store, prefix=prefix, lease_seconds=lease_seconds, policy=RetryPolicy(10, 0.2, 1.0))


def first_receipt_after(received_at: Iterable[float], t: float) -> float | None:
    """Seconds from wall-clock time `t` (a kill) to the first receipt after it at a recipient (its
    `received_at` times, epoch seconds), None if nothing arrived after it."""
    later = [r for r in received_at if r >= t]
    return round(min(later) - t, 2) if later else None


def longest_pause(received_at: Iterable[float], start: float, end: float) -> tuple[float, float | None]:
    """The longest stretch without a receipt at a recipient within [start, end] (epoch seconds):
    (seconds, when it began)."""
    times = sorted(r for r in received_at if start <= r <= end)
    edges = [start, *times, end]
    best, at = 0.0, None
    for a, b in zip(edges, edges[1:]):
        if b - a > best:
            best, at = b - a, a
    return round(best, 2), at
