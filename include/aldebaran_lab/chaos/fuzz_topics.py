"""`aldebaran chaos fuzz`, the alert topics: hostile alerts through every process that consumes them.

The exact lane's `alerts` through the dispatcher, `alerts.fast` through the fast dispatcher
(`aldebaran dispatch --fast`'s FastChannelDispatcher) and both through the lane reconciler's decode path.
All of them decode with aldebaran.delivery.decode; the fuzz drives the consumers themselves, not the decoder
alone, so that what a consumer does with a rejected message (dead letter, offset, run) is exercised too.

Each topic gets hand-made malformed alerts (:func:`malformed_alerts`) and structure-aware ones from
hypothesis (valid-looking alert JSON, broken: aldebaran_lab.chaos.fuzz_inputs), interleaved with valid
alerts. Verdict: no consumer crashes, each hostile message is dead-lettered once per consumer with a reason,
each valid alert reaches the webhook once across both lanes (the channel is fast: the exact lane's copy of
an alert the fast lane sent is a repeat), and the reconciler confirms every valid fast alert.
"""

from __future__ import annotations

import collections
import json
import random
import secrets
import time

from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran_lab.chaos.common import Workspace
from aldebaran_lab.chaos.fuzz_inputs import draw, hostile_documents


def malformed_alerts() -> list[bytes]:
    """Alerts broken by construction (the dispatcher must dead-letter each one)."""
    base = {"alert_id": "x", "kind": "OVERFILL", "order_id": "o"}
    bad_ids = ["../../escape", "a/b", "/abs", "..", "a\x00b", "a\nb", "-lead", ".hidden", "x" * 300, "é", ""]
    out = [b"not json", b"\xff\xfe", b"", b"[]", b"42", b"null", b'"alert"', b'{"alert_id": "a"', b"{" * 5000,
           b"[" * 5000 + b"]" * 5000, b" " * (2 * 1024 * 1024)]  # valid JSON too deep; over the size bound
    out += [json.dumps({**base, "alert_id": i}).encode() for i in bad_ids]
    out += [json.dumps({**base, "alert_id": v}).encode() for v in (7, None, [], {}, True)]
    out += [json.dumps({k: v for k, v in base.items() if k != drop}).encode() for drop in base]
    out += [json.dumps({**base, "kind": v}).encode() for v in (None, 3, "")]
    return out


def rejected_by_decoder(value: bytes) -> bool:
    """Whether the one alert decoder rejects `value` (what every consumer must then dead-letter). Anything
    but AlertError out of it is a crash: it propagates and fails the campaign."""
    from aldebaran.model import Alert, AlertError

    try:
        Alert.from_json(value)
    except AlertError:
        return True
    return False


def hostile_alerts(n: int, seed: int) -> tuple[list[bytes], int]:
    """`n` structure-aware hostile alerts the decoder rejects; and how many draws were valid (dropped)."""
    from aldebaran_lab.chaos.kill_dispatch import make_alerts

    return draw(hostile_documents(make_alerts(1, "fuzz")[0]), n, rejected_by_decoder, seed)


def _mixed(good: list[dict], bad: list[bytes], seed: int) -> list[tuple]:
    records = [(a["alert_id"], json.dumps(a)) for a in good] + [(b"bad", b) for b in bad]
    random.Random(seed).shuffle(records)
    return records


def run_alerts(inputs: int = 10_000, good: int = 50, seed: int = 5) -> dict:
    """The alert topics' targets: one workspace, `inputs` hostile alerts on each of `alerts` and `alerts.fast`."""
    from aldebaran.delivery.channels import WebhookChannel
    from aldebaran.delivery.decode import AlertDeadLetters
    from aldebaran.delivery.dispatcher import Dispatcher
    from aldebaran.delivery.fast import FastChannelDispatcher
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.lanes.reconciler import Reconciler
    from aldebaran_capacity.receivers import WebhookReceiver
    from aldebaran_lab.chaos.kill_dispatch import make_alerts

    ws = Workspace.create("fuzz-alerts", s3a=False)
    ws.kafka = ws.kafka.model_copy(update={"fast_alerts_topic": f"chaos-{ws.name}-alerts-fast"})
    kadmin.ensure_topics(ws.kafka, [ws.kafka.fast_alerts_topic])
    try:
        t0 = time.monotonic()
        hand = malformed_alerts()
        hostile, dropped = hostile_alerts(max(0, inputs - len(hand)), seed)
        bad = hand + hostile
        gen_s = time.monotonic() - t0
        oks = make_alerts(good, ws.name)
        producer = kio.producer(ws.kafka)
        kio.produce_all(producer, ws.kafka.alerts_topic, _mixed(oks, bad, seed))
        kio.produce_all(producer, ws.kafka.fast_alerts_topic, _mixed(oks, bad, seed + 1))
        out: dict = {"hostile_per_topic": len(bad), "of_which_structure_aware": len(hostile),
                     "accidentally_valid_dropped": dropped, "good_sent": good, "generate_s": round(gen_s, 1)}
        crashes: list[str] = []
        secret = secrets.token_urlsafe(24)
        settings = DeliverySettings(prefix=f"{ws.prefix}/deliveries")
        ledger = Ledger.from_settings(settings, ws.store)
        with WebhookReceiver(secret) as receiver:
            for lane, worker in (("exact", None), ("fast", FastChannelDispatcher)):
                channel = WebhookChannel("webhook", receiver.url + "/alerts", secret)
                channel.fast = True  # both lanes keep sent markers: each alert once across them
                extra = {"worker": worker} if worker else {}
                t1 = time.monotonic()
                try:
                    stats = Dispatcher(ledger, [channel], kafka=ws.kafka, group=f"chaos-{ws.name}", settings=settings,
                                       **extra).run_once(idle_timeout=3.0)
                    out[f"{lane}_dispatcher"] = {"malformed_seen": stats.malformed, "alerts": stats.alerts,
                                                 "seconds": round(time.monotonic() - t1, 1)}
                except Exception as exc:  # noqa: BLE001 - a crash is the finding
                    crashes.append(f"{lane} dispatcher: {type(exc).__name__}: {str(exc)[:300]}")
            out["good_delivered"] = len(receiver.accepted)
            out["good_delivered_once"] = all(n == 1 for n in receiver.requests_per_key.values())
        out["reconciler"] = _reconcile(ws, 2 * (len(bad) + good), crashes, AlertDeadLetters(ws.kafka), Reconciler)
        letters = collections.Counter()
        no_reason = 0
        for m in kio.read_topic(ws.kafka, ws.kafka.alerts_dlq_topic):
            headers = dict(m.headers() or [])
            letters[(headers.get("aldebaran.consumer") or b"").decode().split(":")[0] + ":" +
                    (headers.get("aldebaran.source.topic") or b"").decode().rsplit("-", 1)[-1]] += 1
            no_reason += not headers.get("aldebaran.reason")
        out["dead_letters"] = dict(letters)
        out["dead_letters_without_reason"] = no_reason
        escaped = [o["Key"] for o in ws.store.list(ws.prefix + "/") if "/../" in o["Key"] or "escape" in o["Key"]]
        out["keys_outside_prefix"] = escaped + [o["Key"] for o in ws.store.list("escape")]
        out["crashes"] = crashes
        return out
    finally:
        kadmin.delete_topics(ws.kafka, [ws.kafka.fast_alerts_topic])
        ws.cleanup()


def _reconcile(ws, total: int, crashes: list, dead_letters, reconciler_cls) -> dict:
    """The lane reconciler over both topics from their start, until it has read every message."""
    t0 = time.monotonic()
    rec = reconciler_cls(ws.kafka, ws.store, "fuzz", ttl_seconds=60.0, records_prefix=f"{ws.prefix}/lanes",
                         resume_ms=0, dead_letters=dead_letters)
    read = 0
    try:
        while read < total and time.monotonic() - t0 < 300:
            read += rec.step(timeout=1.0)
    except Exception as exc:  # noqa: BLE001 - a crash is the finding
        crashes.append(f"reconciler: {type(exc).__name__}: {str(exc)[:300]}")
    finally:
        rec.close()
    status = rec.state.status()
    return {"read": read, "rejected": rec.rejected, "unconfirmed": status["counts"].get("unconfirmed"),
            "seconds": round(time.monotonic() - t0, 1)}


def failures(alerts: dict) -> list[str]:
    out = [f"alerts: {c}" for c in alerts["crashes"]]
    n = alerts["hostile_per_topic"]
    for lane in ("exact", "fast"):
        seen = alerts.get(f"{lane}_dispatcher", {}).get("malformed_seen")
        if seen != n:
            out.append(f"alerts: the {lane} dispatcher saw {seen} malformed of {n}")
    rec = alerts["reconciler"]
    if rec["rejected"] != 2 * n or rec["unconfirmed"]:
        out.append(f"alerts: the reconciler rejected {rec['rejected']} of {2 * n}, unconfirmed {rec['unconfirmed']}")
    want = {"dispatcher:alerts": n, "dispatcher:fast": n, "reconciler:alerts": n, "reconciler:fast": n}
    if alerts["dead_letters"] != want or alerts["dead_letters_without_reason"]:
        out.append(f"alerts: dead letters {alerts['dead_letters']} (want {want}), "
                   f"{alerts['dead_letters_without_reason']} without a reason")
    if alerts["good_delivered"] != alerts["good_sent"] or not alerts["good_delivered_once"]:
        out.append(f"alerts: {alerts['good_delivered']} of {alerts['good_sent']} valid alerts delivered "
                   f"(once each: {alerts['good_delivered_once']})")
    if alerts["keys_outside_prefix"]:
        out.append(f"alerts: keys outside the prefix {alerts['keys_outside_prefix'][:5]}")
    return out
