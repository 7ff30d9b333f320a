"""`aldebaran chaos fuzz`: malformed and hostile input everywhere it can enter, through the real readers.

1. **Trades**: hypothesis generates `payloads` malformed/hostile messages (invalid UTF-8, deep nesting,
   huge numbers, wrong types, negative/fractional/out-of-range shares, overlong ids, NUL and control
   characters, duplicate keys, trailing garbage, non-objects), plus a few 10 MB messages; they are
   interleaved with the original publisher's mix and go through the real auditor (available-now).
   Verdict: the run ends cleanly (0 crashes), every malformed message is on `trades.dlq` byte for byte
   with a reason code equal to the reference validator's, nothing else is (the publisher's mix is all
   valid, its 0-share purchases included), and the alerts equal the reference model's on the whole stream.
2. **Alerts** (aldebaran_lab.chaos.fuzz_topics): `inputs` hostile alerts on each of `alerts` and
   `alerts.fast` (hand-made ones and structure-aware ones: valid-looking alert JSON, broken), among valid
   ones, through the dispatcher, the fast dispatcher and the lane reconciler: each dead-lettered with its
   reason by each consumer, each valid one delivered once across both lanes, 0 crashes.
3. **Store** (fuzz_store, fuzz_state): `inputs` hostile objects of each kind a process reads (delivery
   records, index keys, runs, partition owners, heartbeats, checkpoint leases, the books' plan.json) under
   the real keys, read by the real readers: 0 crashes, each corrupt one quarantined or reported with a reason.
4. **Connection extras** (fuzz_extras): `inputs` hostile extras per channel kind: each builds a channel or
   raises ConfigError, 0 crashes.
5. **Settings**: each invalid setting fails at start with a ConfigError naming its variable.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import subprocess
import time

from aldebaran.audit import reference
from aldebaran.audit import parse as events
from aldebaran.runtime import paths
from aldebaran.kafka import io as kio
from aldebaran_capacity import loadgen
from aldebaran_lab.chaos.fuzz_inputs import draw
from aldebaran_lab.chaos.common import (
    AuditorProcess, CampaignResult, ChaosError, Workspace, auditor_args, compare_alerts, topic_alerts, topic_env,
)

log = logging.getLogger(__name__)

TTL_SECONDS = 86_400.0
BIG = 10 * 1024 * 1024


# --- hostile trades ---------------------------------------------------------------------------------
def hostile_trades():
    """A hypothesis strategy of malformed or hostile trade messages (bytes)."""
    from hypothesis import strategies as st

    ids = st.one_of(st.text(max_size=20), st.integers(), st.text(min_size=129, max_size=3000),
                    st.text(alphabet=st.characters(max_codepoint=0x1f), min_size=1, max_size=5),
                    st.just("a\x00b"), st.just("../../etc/passwd"), st.just("/abs"), st.just(""))
    wrong = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=3),
                      st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.text(max_size=10))
    bad_shares = st.one_of(st.integers(max_value=-1), st.integers(min_value=10**12 + 1, max_value=10**40),
                           st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
                           wrong)

    def event(order_id, shares, purchase, client="Sendence", stock="AAPL") -> dict:
        e = {"id": order_id if not purchase else "p-" + str(order_id), "#shares": shares, "client": client,
             "stock": stock}
        if purchase:
            e["initial_order_id"] = order_id
        return e

    as_json = lambda obj: json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")  # noqa: E731
    objects = st.one_of(
        st.builds(event, ids, st.integers(1, 100), st.booleans()),                      # hostile ids
        st.builds(event, st.just("o-1"), bad_shares, st.booleans()),                    # bad shares
        st.builds(event, st.just("o-2"), st.integers(1, 100), st.booleans(), wrong, wrong),  # wrong types
        st.builds(lambda e, drop: {k: v for k, v in e.items() if k != drop},            # missing field
                  st.builds(event, st.just("o-3"), st.integers(1, 100), st.booleans()),
                  st.sampled_from(["id", "#shares", "client", "stock", "initial_order_id"])),
    ).map(as_json)
    raw = st.one_of(
        st.binary(max_size=200).map(lambda b: b'{"id": "' + b + b'\xff\xfe", "#shares": 1}'),  # invalid UTF-8
        st.integers(1000, 3000).map(lambda n: b"[" * n + b"]" * n),                         # deep arrays
        st.integers(1000, 3000).map(lambda n: b'{"id":' + b'{"a":' * n + b"1" + b"}" * n + b"}"),  # deep objects
        st.integers(20, 2500).map(lambda n: b'{"id":"h","#shares":' + b"9" * n + b',"client":"c","stock":"s"}'),
        st.sampled_from([b"", b"null", b"[]", b"42", b'"str"', b"true", b"NaN", b'{"id": NaN}', b"{", b"}",
                         b'{"id":"d","id":"e","#shares":1,"client":"c","stock":"s"}',          # duplicate key
                         b'{"id":"t","#shares":1,"client":"c","stock":"s"} trailing',
                         b'{"id":"u","#shares":1,"client":"c","stock":"s"}{"x":1}',
                         b'{"id":"\\ud800","#shares":1,"client":"c","stock":"s"}',              # lone surrogate
                         b'{"id":"z","#shares":1e400,"client":"c","stock":"s"}',
                         b'{"id":"n\x00ul","#shares":1,"client":"c","stock":"s"}']),
        st.lists(st.integers(), max_size=5).map(as_json),
        st.binary(max_size=300),
    )
    return st.one_of(objects, raw)


def generate_trades(n: int, seed: int) -> tuple[list[bytes], int]:
    """`n` hostile messages that the reference validator rejects (accidentally valid draws are dropped)."""
    return draw(hostile_trades(), n, lambda payload: isinstance(events.validate(payload), events.Invalid), seed)


def big_messages(count: int) -> list[bytes]:
    """10 MB messages: a huge id, huge whitespace, a huge client string."""
    kinds = [
        lambda: b'{"id":"' + b"a" * BIG + b'","#shares":5,"client":"c","stock":"s"}',
        lambda: b'{"id":"w","#shares":5,' + b" " * BIG + b'"client":"c","stock":"s"}',
        lambda: b'{"id":"v","#shares":5,"client":"' + b"c" * BIG + b'","stock":"s"}',
    ]
    return [kinds[i % len(kinds)]() for i in range(count)]


def run_trades(payloads: int = 10_000, orders: int = 2_000, big: int = 3, seed: int = 1, spark=None) -> dict:
    ws = Workspace.create("fuzz", s3a=False)
    try:
        t0 = time.monotonic()
        bad, dropped = generate_trades(payloads, seed)
        bad += big_messages(big)
        gen_s = time.monotonic() - t0
        good = [(r.key, r.value) for r in loadgen.records(loadgen.original_mix(orders, seed))]
        rng = random.Random(seed)
        stream = [(b"fuzz-%d" % i, v) for i, v in enumerate(bad)] + good
        # Interleave, keeping the original order of the good events (one order's events stay in order).
        slots = sorted(rng.sample(range(len(stream)), len(bad)))
        mixed, bi, gi = [], 0, 0
        bad_slots = set(slots)
        for i in range(len(stream)):
            if i in bad_slots:
                mixed.append((b"fuzz-%d" % bi, bad[bi]))
                bi += 1
            else:
                mixed.append(good[gi])
                gi += 1
        kio.produce_all(kio.producer(ws.kafka), ws.kafka.trades_topic, mixed)
        expected = reference.expected_alerts([v for _, v in mixed], ttl_ms=int(TTL_SECONDS * 1000))
        want_codes = {}
        for v in bad:
            inv = events.validate(v)
            want_codes[v] = inv.code

        crash = None
        t1 = time.monotonic()
        if spark is not None:
            from aldebaran.audit.sparkjob import job
            from aldebaran.audit.settings import AuditorSettings
            from aldebaran.settings import load

            with topic_env(ws.kafka):
                settings = load(AuditorSettings, checkpoint=ws.checkpoint, trigger="available-now",
                                ttl_seconds=TTL_SECONDS, query_name=ws.name, archive_prefix=f"{ws.prefix}/archive",
                                max_offsets_per_trigger=50_000)
                try:
                    job.run(settings, spark=spark)
                except Exception as exc:  # noqa: BLE001 - a crash is the finding this campaign reports
                    crash = f"{type(exc).__name__}: {str(exc)[:500]}"
        else:
            auditor = AuditorProcess(ws.env(), auditor_args(ws, trigger="available-now", max_offsets=50_000,
                                                            ttl_seconds=TTL_SECONDS), ws.logs / "auditor.log")
            auditor.start()
            try:
                rc = auditor.proc.wait(1800)
            except subprocess.TimeoutExpired:
                auditor.kill()
                rc = "timeout"
            if rc != 0:
                crash = f"auditor exited {rc}: {auditor.tail(10)}"
        audit_s = time.monotonic() - t1

        dlq = kio.read_topic(ws.kafka, ws.kafka.dlq_topic, timeout=300)
        got = collections.Counter(m.value() or b"" for m in dlq)
        # The original publisher's mix is valid throughout: its purchases of int(limit/2 * random()) shares
        # are 0 for ~2 % of them, which the contract accepts (audited, counting 0). Anything of it the
        # reference rejected would be expected on the DLQ too, and is a failure of its own (run()).
        verdicts = [events.validate(v) for _, v in good]
        good_rejected = [v for (_, v), e in zip(good, verdicts) if isinstance(e, events.Invalid)]
        zero_share = sum(1 for e in verdicts if isinstance(e, events.Event) and e.shares == 0)
        for v in good_rejected:
            want_codes[v] = events.validate(v).code
        want = collections.Counter(bad) + collections.Counter(good_rejected)
        wrong_reason = []
        no_reason = 0
        for m in dlq:
            headers = dict(m.headers() or [])
            code = (headers.get("aldebaran.reason_code") or b"").decode()
            if not code or not headers.get("aldebaran.reason"):
                no_reason += 1
            value = m.value() or b""
            if value in want_codes and code != want_codes[value]:
                wrong_reason.append({"value": value[:80], "jvm": code, "reference": want_codes[value]})
        verdict = compare_alerts(topic_alerts(ws.kafka), expected)
        return {
            "payloads": len(bad), "of_which_10MB": big, "accidentally_valid_dropped": dropped,
            "valid_events": len(good), "publisher_mix_rejected": len(good_rejected),
            "zero_share_purchases": zero_share,
            "generate_s": round(gen_s, 1), "audit_s": round(audit_s, 1),
            "crash": crash,
            "dlq_records": len(dlq), "missing_from_dlq": sum((want - got).values()),
            "unexpected_in_dlq": sum((got - want).values()), "dlq_without_reason": no_reason,
            "unexpected_examples": [{"value": v[:80], "times": n} for v, n in list((got - want).items())[:5]],
            "reason_differs_from_reference": len(wrong_reason), "reason_examples": wrong_reason[:5],
            "reason_codes": dict(collections.Counter(want_codes[v] for v in bad)),
            "alerts": verdict.summary(), "alerts_ok": verdict.ok,
        }
    finally:
        ws.cleanup()


# --- malformed settings -------------------------------------------------------------------------------
BAD_SETTINGS = [
    ("KafkaSettings", "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", ""),
    ("KafkaSettings", "ALDEBARAN_KAFKA_PARTITIONS", "0"),
    ("KafkaSettings", "ALDEBARAN_KAFKA_TRADES_TOPIC", "bad topic/../x"),
    ("KafkaSettings", "ALDEBARAN_KAFKA_MAX_MESSAGE_BYTES", "12"),
    ("ObjectStoreSettings", "ALDEBARAN_S3_BUCKET", "Bad_Bucket"),
    ("ObjectStoreSettings", "ALDEBARAN_S3_REGION", ""),
    ("AuditorSettings", "ALDEBARAN_AUDIT_SHARDS", "0"),
    ("AuditorSettings", "ALDEBARAN_AUDIT_TTL_SECONDS", "-1"),
    ("AuditorSettings", "ALDEBARAN_AUDIT_TRIGGER", "sometimes"),
    ("AuditorSettings", "ALDEBARAN_AUDIT_QUERY_NAME", "../escape"),
    ("AuditorSettings", "ALDEBARAN_AUDIT_MAX_OFFSETS_PER_TRIGGER", "many"),
    ("AuditorSettings", "ALDEBARAN_AUDIT_RULES", " , "),
    ("AuditorSettings", "ALDEBARAN_AUDIT_CHECKPOINT", ""),
]


def run_settings() -> dict:
    """Each bad setting, one at a time: the error must be a ConfigError that names the variable."""
    from aldebaran import settings as settings_mod
    from aldebaran.audit.rules import resolve
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.exceptions import ConfigError

    classes = {"KafkaSettings": settings_mod.KafkaSettings, "ObjectStoreSettings": settings_mod.ObjectStoreSettings,
               "AuditorSettings": AuditorSettings}
    results = []
    for cls_name, var, value in BAD_SETTINGS:
        saved = os.environ.get(var)
        os.environ[var] = value
        try:
            settings_mod.load(classes[cls_name])
            results.append({"var": var, "named": False, "error": "accepted"})
        except ConfigError as exc:
            results.append({"var": var, "named": var in str(exc), "error": str(exc)[:200]})
        finally:
            if saved is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = saved
    try:
        resolve(["overfill", "no-such-rule"])
        results.append({"var": "ALDEBARAN_AUDIT_RULES", "named": False, "error": "unknown rule accepted"})
    except ConfigError as exc:
        results.append({"var": "ALDEBARAN_AUDIT_RULES", "named": "ALDEBARAN_AUDIT_RULES" in str(exc),
                        "error": str(exc)[:200]})
    # Through the real command line: exit status 2 and the variable named on stderr.
    proc = subprocess.run([str(paths.venv_bin("aldebaran")), "auditor", "run", "--shards", "0"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    results.append({"var": "ALDEBARAN_AUDIT_SHARDS (CLI)", "named": proc.returncode == 2
                    and "ALDEBARAN_AUDIT_SHARDS" in proc.stderr, "error": proc.stderr.strip()[-200:]})
    return {"cases": len(results), "not_named": [r for r in results if not r["named"]], "results": results}


TARGETS = ("trades", "alerts", "store", "extras", "settings")


def run(payloads: int = 10_000, orders: int = 2_000, big: int = 3, seed: int = 1, mode: str = "full",
        spark=None, inputs: int = 10_000, targets: tuple = TARGETS) -> CampaignResult:
    """`payloads` hostile trades; `inputs` hostile inputs per target of the other readers (each alert topic,
    each stored object kind, each channel kind's extras); `targets`: which of TARGETS to run."""
    from aldebaran_lab.chaos import fuzz_extras, fuzz_objects, fuzz_topics

    t0 = time.monotonic()
    result = CampaignResult("fuzz", mode, runs=1, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    details: dict = {"inputs_per_target": inputs}
    try:
        if "trades" in targets:
            details["trades"] = trades = run_trades(payloads, orders, big, seed, spark=spark)
            failures += _trade_failures(trades)
        if "alerts" in targets:
            details["alerts"] = alerts = fuzz_topics.run_alerts(inputs, seed=seed + 4)
            failures += fuzz_topics.failures(alerts)
        if "store" in targets:
            details["store"] = store = fuzz_objects.run_store(inputs, seed=seed + 6)
            failures += fuzz_objects.failures(store, inputs)
        if "extras" in targets:
            details["extras"] = extras = fuzz_extras.run_extras(inputs, seed=seed + 10)
            failures += fuzz_extras.failures(extras, inputs)
        if "settings" in targets:
            details["settings"] = settings = run_settings()
            details["settings"].pop("results")
            if settings["not_named"]:
                failures.append(f"settings: {settings['not_named']}")
    except ChaosError as exc:
        result.details = {"failures": [str(exc)]}
        result.lost = -1
        return result.finish(t0)
    result.rows = _rows(details, big)
    result.faults = sum(r["faults"] for r in result.rows)
    if "trades" in details:
        t = details["trades"]
        result.lost += t["missing_from_dlq"] + t["alerts"]["missing"]
        result.duplicated += t["alerts"]["extra"]
    if "alerts" in details:
        a = details["alerts"]
        result.lost += a["good_sent"] - a["good_delivered"]
        result.duplicated += int(not a["good_delivered_once"])
    result.details = {**details, "failures": failures}
    return result.finish(t0)


def _trade_failures(trades: dict) -> list[str]:
    out = [f"auditor crashed: {trades['crash']}"] if trades["crash"] else []
    for k in ("missing_from_dlq", "unexpected_in_dlq", "dlq_without_reason", "reason_differs_from_reference",
              "publisher_mix_rejected"):
        if trades[k]:
            out.append(f"trades: {k} = {trades[k]}")
    if not trades["alerts_ok"]:
        out.append(f"trades: alerts differ from the reference: {trades['alerts']}")
    return out


def _rows(details: dict, big: int) -> list[dict]:
    """The report's table: one row per target (per object kind, per channel kind)."""
    rows = []
    if "trades" in details:
        t = details["trades"]
        rows.append({"scenario": f"hostile trades through the auditor ({t['payloads']} incl. {big} × 10 MB, "
                                 f"+{t['valid_events']} valid)", "runs": 1, "faults": t["payloads"],
                     "lost": t["missing_from_dlq"] + t["alerts"]["missing"], "duplicated": t["alerts"]["extra"],
                     "recovery": "0 crashes" if not t["crash"] else "CRASHED"})
    if "alerts" in details:
        a = details["alerts"]
        n, crashed = a["hostile_per_topic"], len(a["crashes"])
        for topic, consumers in (("alerts", "dispatcher, reconciler"), ("alerts.fast", "fast dispatcher, reconciler")):
            rows.append({"scenario": f"hostile alerts on {topic} ({n}, +{a['good_sent']} valid) through the "
                                     f"{consumers}", "runs": 1, "faults": n,
                         "lost": a["good_sent"] - a["good_delivered"], "duplicated": int(not a["good_delivered_once"]),
                         "recovery": f"{crashed} crashes; " + ", ".join(
                             f"{v} dead-lettered by {k.split(':')[0]}" for k, v in sorted(a["dead_letters"].items())
                             if k.endswith(topic.rsplit(".", 1)[-1]))})
    for group, label in (("store", "hostile stored {kind} through its reader"),
                         ("extras", "hostile connection extras of a {kind} channel")):
        for kind, r in details.get(group, {}).items():
            outcome = ", ".join(f"{r[k]} {k}" for k in ("quarantined", "reported", "accepted", "unstorable")
                                if r.get(k))
            rows.append({"scenario": label.format(kind=kind.replace("_", " ")), "runs": 1, "faults": r["inputs"],
                         "lost": "–", "duplicated": "–", "recovery": f"{r['crashes']} crashes; {outcome}"})
    if "settings" in details:
        s = details["settings"]
        rows.append({"scenario": "malformed settings at start", "runs": s["cases"], "faults": s["cases"],
                     "lost": "–", "duplicated": "–",
                     "recovery": f"{s['cases'] - len(s['not_named'])} named the setting"})
    return rows
