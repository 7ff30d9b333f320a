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

from aldebaran import kafka_admin, kafka_io, paths, reference
from aldebaran.delivery.channels import sms_text
from aldebaran.delivery.ledger import DELIVERED, IN_DOUBT
from aldebaran.exceptions import AldebaranError
from aldebaran.objectstore import ObjectStore
from aldebaran.settings import KafkaSettings, load

log = logging.getLogger(__name__)

TOPIC_ENV = {
    "trades_topic": "ALDEBARAN_KAFKA_TRADES_TOPIC",
    "alerts_topic": "ALDEBARAN_KAFKA_ALERTS_TOPIC",
    "dlq_topic": "ALDEBARAN_KAFKA_DLQ_TOPIC",
}


class ChaosError(AldebaranError):
    """A campaign could not run (not: a campaign found a problem — that is in its result)."""


# --- workspace ------------------------------------------------------------------------------------
@dataclass
class Workspace:
    """One campaign's own topics, object-store prefix and checkpoint; never shared with anyone."""

    name: str
    kafka: KafkaSettings
    store: ObjectStore
    prefix: str
    checkpoint: str
    logs: Path

    @classmethod
    def create(cls, campaign: str, s3a: bool = True, kafka: KafkaSettings | None = None,
               store: ObjectStore | None = None) -> "Workspace":
        tag = f"{campaign}-{uuid.uuid4().hex[:8]}"
        base = kafka or load(KafkaSettings)
        topics = {"trades_topic": f"chaos-{tag}-trades", "alerts_topic": f"chaos-{tag}-alerts",
                  "dlq_topic": f"chaos-{tag}-dlq"}
        settings = base.model_copy(update=topics)
        kafka_admin.ensure_topics(settings)
        store = store or ObjectStore()
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
        from aldebaran.audit.heartbeat import heartbeat_key

        kafka_admin.delete_topics(self.kafka, self.kafka.topics())
        self.store.delete_prefix(self.prefix + "/")
        self.store.delete(heartbeat_key(self.name))


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
        from aldebaran.services.base import tail

        return tail(self.log_path, lines)


def _reap_group(pgid: int) -> None:
    """Whatever of the group outlived its leader (a JVM) goes too: we started it."""
    from aldebaran.services.base import Service

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
    root = ws.checkpoint.rstrip("/") + "/spark/" + sub
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


def committed(ws: Workspace) -> tuple[int, dict[int, int]]:
    """(number of committed batches, the trades topic's offsets up to which they reach)."""
    commits = _checkpoint_files(ws, "commits")
    if not commits:
        return 0, {}
    last = max(commits)
    offsets = _checkpoint_files(ws, "offsets")
    if last not in offsets:
        return len(commits), {}
    for line in _read(ws, offsets[last]).splitlines()[2:]:
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict) and ws.kafka.trades_topic in value:
                return len(commits), {int(p): int(o) for p, o in value[ws.kafka.trades_topic].items()}
    return len(commits), {}


def caught_up(ws: Workspace, ends: dict[int, int] | None = None) -> bool:
    ends = ends if ends is not None else kafka_io.end_offsets(ws.kafka, ws.kafka.trades_topic)
    _, done = committed(ws)
    return all(done.get(p, 0) >= end for p, end in ends.items() if end > 0)


def wait_for(check, timeout: float, interval: float = 1.0, what: str = "condition", on_tick=None) -> float:
    """Poll `check` until truthy; returns the seconds it took. Raises ChaosError after `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if check():
            return time.monotonic() - t0
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
    return [json.loads(m.value()) for m in kafka_io.read_topic(kafka, kafka.alerts_topic, timeout=timeout)]


# --- results ------------------------------------------------------------------------------------------
@dataclass
class CampaignResult:
    campaign: str
    mode: str  # "full" or "short"
    runs: int  # processes started (auditor or dispatch workers)
    faults: int  # faults injected
    lost: int
    duplicated: int
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
                            "recovery": recovery_text(result.recovery_s)}]
    out = [
        f"Command: `{command}` — {result.mode} mode, started {result.started}, took {result.seconds:.0f} s; "
        f"load average (1/5/15 min) before {result.load_before}, after {result.load_after} "
        "(2-core machine shared with other work: times are indicative).",
        "",
        "| scenario | runs | faults injected | lost | duplicated | recovery time |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(f"| {r['scenario']} | {r['runs']} | {r['faults']} | {r['lost']} | {r['duplicated']} | {r['recovery']} |")
    out += ["", "<details><summary>details</summary>", "", "```json",
            json.dumps(result.details, indent=2, default=str), "```", "</details>", ""]
    return "\n".join(out)


def write_report(result: CampaignResult, command: str, path: Path | None = None) -> Path:
    """Replace this campaign's section of docs/reliability.md (between its markers) with the new table."""
    path = path or paths.ROOT / "docs" / "reliability.md"
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


def channel_connections(webhook, secret: str, sms) -> dict[str, str]:
    """AIRFLOW_CONN_* for the campaigns' webhook (HMAC-signed with `secret`) and SMS test receivers."""
    return {
        "AIRFLOW_CONN_ALDEBARAN_WEBHOOK": json.dumps({"conn_type": "http", "host": webhook.url, "password": secret,
                                                      "extra": {"endpoint": "/alerts", "timeout": 5}}),
        "AIRFLOW_CONN_ALDEBARAN_SMS": json.dumps({"conn_type": "sms", "host": sms.url, "login": sms.account_sid,
                                                  "password": sms.auth_token,
                                                  "extra": {"from": "+15550001111", "to": "+15552223333",
                                                            "timeout": 5}}),
    }


# --- delivery verdict (kill-dispatch, kill-scheduler) ------------------------------------------------
@dataclass(frozen=True)
class DeliveryVerdict:
    """What the webhook receiver and the SMS provider got, against the alerts and their delivery records.

    Webhook (deduplicates by Idempotency-Key): an alert is lost if the receiver never accepted it or its
    record is not DELIVERED (counted once if both); every 201 beyond one per accepted key is a duplicate.
    SMS (cannot deduplicate): a text sent more than once is a duplicate; an alert is lost unless its
    record is IN_DOUBT (for an operator) or DELIVERED with its text received by the provider."""

    lost_webhook: frozenset[str]
    webhook_delivered_twice: int  # 201 answers beyond one per accepted key
    unexpected_webhook: tuple[str, ...]  # accepted keys that are no alert of the batch, sorted
    webhook_accepted: int
    webhook_statuses: tuple[tuple[int, int], ...]  # (HTTP status, count) in the receiver's order
    webhook_resent_deduplicated: int  # requests beyond the first per Idempotency-Key
    webhook_bad_signatures: int
    webhook_incomplete_requests: int
    lost_sms: frozenset[str]
    sms_sent_twice: int  # texts (recipient, body) the provider got more than once
    sms_messages: int
    sms_delivered: int  # records DELIVERED
    sms_in_doubt: frozenset[str]  # records IN_DOUBT
    sms_in_doubt_actually_sent: int  # of those, the provider did receive the text

    @property
    def lost(self) -> int:
        return len(self.lost_webhook) + len(self.lost_sms)

    @property
    def duplicated(self) -> int:
        return self.sms_sent_twice + self.webhook_delivered_twice

    def failures(self) -> list[str]:
        return [f"{len(self.unexpected_webhook)} unexpected webhook deliveries"] if self.unexpected_webhook else []

    def details(self) -> dict:
        """The campaign details' "webhook" and "sms" entries."""
        return {
            "webhook": {"accepted": self.webhook_accepted, "statuses": dict(self.webhook_statuses),
                        "resent_same_key_deduplicated": self.webhook_resent_deduplicated,
                        "lost": len(self.lost_webhook), "bad_signatures": self.webhook_bad_signatures,
                        "incomplete_requests_dropped": self.webhook_incomplete_requests},
            "sms": {"messages": self.sms_messages, "texts_sent_twice": self.sms_sent_twice,
                    "delivered": self.sms_delivered, "in_doubt": len(self.sms_in_doubt),
                    "in_doubt_actually_sent": self.sms_in_doubt_actually_sent, "lost": len(self.lost_sms)},
        }

    def rows(self, runs: int, faults: int, recovery: str) -> list[dict]:
        """The results table's webhook and SMS rows."""
        return [
            {"scenario": "webhook (idempotent)", "runs": runs, "faults": faults,
             "lost": len(self.lost_webhook), "duplicated": self.webhook_delivered_twice, "recovery": recovery},
            {"scenario": f"sms (cannot dedupe; {len(self.sms_in_doubt)} IN_DOUBT)", "runs": runs,
             "faults": faults, "lost": len(self.lost_sms), "duplicated": self.sms_sent_twice, "recovery": recovery},
        ]

    @classmethod
    def from_receivers(cls, alerts: Sequence[Mapping], webhook, sms,
                       records: Mapping[str, Mapping[str, object]]) -> "DeliveryVerdict":
        """From the test receivers (WebhookReceiver, SmsProvider) and the ledger's records per channel
        (channel → alert id → record with a `state`)."""
        return delivery_verdict(
            alerts, webhook_accepted=webhook.accepted, webhook_statuses=webhook.statuses,
            webhook_requests_per_key=webhook.requests_per_key, webhook_bad_signatures=webhook.rejected_signatures,
            webhook_incomplete_requests=webhook.incomplete_requests,
            sms_bodies=[m.body for m in sms.messages], sms_sends=sms.sends,
            ledger_states={ch: {i: r.state for i, r in recs.items()} for ch, recs in records.items()},
        )


def delivery_verdict(alerts: Sequence[Mapping], *, webhook_accepted: Iterable[str],
                     webhook_statuses: Mapping[int, int], webhook_requests_per_key: Mapping[str, int],
                     webhook_bad_signatures: int, webhook_incomplete_requests: int,
                     sms_bodies: Iterable[str], sms_sends: Mapping[Hashable, int],
                     ledger_states: Mapping[str, Mapping[str, str]]) -> DeliveryVerdict:
    """The verdict for `alerts` (each sent once to channels `webhook` and `sms`): `webhook_*` the receiver's
    accepted keys (alert ids) and counts, `sms_bodies` every text the provider got and `sms_sends` its sends
    per text, `ledger_states` the delivery records' states, channel → alert id (no entry: no record)."""
    ids = {a["alert_id"] for a in alerts}
    by_text = {sms_text(a): a["alert_id"] for a in alerts}
    bodies = list(sms_bodies)
    texts_received = {by_text.get(b) for b in bodies}
    web_states = {i: ledger_states["webhook"].get(i) for i in ids}
    sms_states = {i: ledger_states["sms"].get(i) for i in ids}
    accepted = set(webhook_accepted)
    in_doubt = frozenset(i for i, s in sms_states.items() if s == IN_DOUBT)
    return DeliveryVerdict(
        lost_webhook=frozenset((ids - accepted) | {i for i, s in web_states.items() if s != DELIVERED}),
        webhook_delivered_twice=webhook_statuses.get(201, 0) - len(accepted),
        unexpected_webhook=tuple(sorted(accepted - ids)),
        webhook_accepted=len(accepted),
        webhook_statuses=tuple(dict(webhook_statuses).items()),
        webhook_resent_deduplicated=sum(n - 1 for n in webhook_requests_per_key.values() if n > 1),
        webhook_bad_signatures=webhook_bad_signatures,
        webhook_incomplete_requests=webhook_incomplete_requests,
        lost_sms=frozenset(i for i, s in sms_states.items()
                           if s not in (DELIVERED, IN_DOUBT) or (s == DELIVERED and i not in texts_received)),
        sms_sent_twice=sum(1 for n in sms_sends.values() if n > 1),
        sms_messages=len(bodies),
        sms_delivered=sum(s == DELIVERED for s in sms_states.values()),
        sms_in_doubt=in_doubt,
        sms_in_doubt_actually_sent=sum(i in texts_received for i in in_doubt),
    )
