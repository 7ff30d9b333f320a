"""Shortened reliability campaigns (aldebaran_lab.chaos) on the real services: the same code `make chaos` runs
at full size, with few faults and small data. Those marked `campaign` run in `make chaos-short`, not in
`make test`. `make test` keeps one kill of each kind of process on the data path, each at its smallest:
the auditor (tests/integration/test_auditor_recovery.py, kill-auditor's short variant), a warm standby's
takeover of a killed auditor, the streaming dispatchers (kill-dispatch) and a Kafka broker and MinIO SIGKILL.

The kill of the Airflow scheduler is a campaign: what it proves of our code (a dispatch task killed between
send and record, then tried again, loses nothing and sends nothing twice) is proven in `make test` by the
crash injections of tests/unit/aldebaran/delivery/test_dispatch_retry_after_kill.py (webhook), tests/unit/aldebaran/delivery/test_dispatch_runs.py
(SMS, log) and tests/integration/test_dispatch_failures.py / test_dispatch_crash_runs.py (real SIGKILLs); the
rest is Airflow's own recovery of its task instances (their retries: tests/dags/test_dag_integrity.py)."""

from __future__ import annotations

import json
import logging

import pytest

from aldebaran_lab.chaos import fuzz, kill_airflow, kill_dispatch, kill_scheduler, outages, under_load

log = logging.getLogger(__name__)


def test_streaming_dispatchers_killed_mid_run_and_between_send_and_record(services_up):
    """Two streaming dispatchers (`aldebaran dispatch --follow`), channels webhook, sms and sms_lookup, SIGKILLed
    in turn (a kill-after-send injection, then from outside) while alerts flow, restarted at once."""
    result = kill_dispatch.run(alerts=300, kills=4, seed=3, mode="short", injection_timeout=30.0)
    log.info("kill-dispatch (short): %s", json.dumps(result.details, default=str)[:4000])
    d = result.details
    assert d["failures"] == []
    # Alternating per dispatcher: an injection that never fires is replaced by an outside kill, and a restarted
    # dispatcher that still carries the injection may die by it before its outside kill lands (SMS sends a window
    # at a time, so there are many sends): both kinds must happen, their split is timing. Both dispatchers can die
    # by their injections in the same pass of the supervisor, so one kill more than asked is possible.
    kills = d["kills"]
    assert 4 <= sum(kills.values()) <= 5 and kills["between_send_and_record"] >= 1 and kills["external_mid_run"] >= 1
    # Idempotent channel: every alert accepted exactly once, nothing missing.
    assert d["webhook"]["accepted"] == 300 and d["webhook"]["statuses"].get(201) == 300
    assert d["webhook"]["lost"] == 0 and d["webhook"]["bad_signatures"] == 0
    # Receipts, held to the webhook's promise (at least once under a stable key): a run a killed dispatcher sent
    # but did not record is sent again under the same keys (answered 409), reported as resent_same_key, not
    # duplicated; the SMS channels allow no resend (a second text would be duplicated).
    assert d["webhook"]["duplicated"] == 0 and d["webhook"]["receipts"] == 300 + d["webhook"]["resent_same_key"]
    assert d["webhook"]["resent_same_key"] == d["webhook"]["statuses"].get(409, 0) == result.resent_same_key
    assert d["sms"]["resent_same_key"] is None and d["sms_lookup"]["receipts"] == 300
    # SMS: never a text twice; each alert DELIVERED or IN_DOUBT (for an operator), none lost.
    assert d["sms"]["texts_sent_twice"] == 0 and d["sms"]["lost"] == 0
    assert d["sms"]["delivered"] + d["sms"]["in_doubt"] == 300
    # SMS with the provider's lookup: every doubt settled by asking, each text exactly once.
    assert d["sms_lookup"]["delivered"] == 300 and d["sms_lookup"]["in_doubt"] == 0
    assert d["sms_lookup"]["texts_sent_twice"] == 0 and d["sms_lookup"]["messages"] == 300
    # (IN_DOUBT after a kill between an SMS send and its record: deterministic in test_dispatch_failures.py)
    assert (result.lost, result.duplicated) == (0, 0)


@pytest.mark.campaign
def test_under_load_auditor_and_dispatchers_killed_at_20k_trades_per_second(services_up):
    """The short under-load campaign: 20k trades/s in the original mix for 20 s through the auditor (a
    subprocess, SIGKILLed once and restarted from its checkpoint) and two streaming dispatchers (webhook, bus;
    the webhook one SIGKILLed once): every expected alert at every recipient once, nothing else."""
    result = under_load.run(rate=20_000, seconds=20.0, kills=2, seed=8, mode="short")
    d = result.details
    log.info("under-load (short): %s", json.dumps({k: v for k, v in d.items() if k != "backlog"}, default=str)[:4000])
    assert d["failures"] == []
    assert d["kills"] == {"auditor": 1, "dispatcher webhook": 1}
    assert d["trades"]["achieved_per_s"] >= 15_000  # offered 20k/s (a loaded machine may fall a little short)
    topic = d["alerts_topic"]
    assert topic["expected"] > 30_000 and (topic["missing"], topic["extra"], topic["changed"]) == (0, 0, 0)
    for name in ("webhook", "bus"):
        r = d["recipients"][name]
        assert (r["received"], r["lost"], r["duplicated"], r["unexpected"]) == (topic["expected"], 0, 0, 0), name
    assert all(e["recovery_s"] is not None for e in d["kill_events"])
    assert (result.lost, result.duplicated) == (0, 0)


def test_fuzzed_hostile_trades_through_the_real_auditor_and_settings(services_up, spark):
    result = fuzz.run(payloads=500, orders=200, big=1, seed=4, mode="short", spark=spark,
                      targets=("trades", "settings"))
    d = result.details
    log.info("fuzz (short): %s", json.dumps(d, default=str)[:3000])
    trades = d["trades"]
    assert trades["crash"] is None
    # 500 generated + one 10 MB message; the publisher mix's 0-share purchases are valid, not on the DLQ
    assert trades["payloads"] == 501 and trades["dlq_records"] == 501
    assert trades["publisher_mix_rejected"] == 0 and trades["zero_share_purchases"] > 0
    assert (trades["missing_from_dlq"], trades["unexpected_in_dlq"], trades["dlq_without_reason"]) == (0, 0, 0)
    assert trades["reason_differs_from_reference"] == 0, trades["reason_examples"]
    assert trades["reason_codes"].get("message_too_large") == 1 and len(trades["reason_codes"]) >= 6
    assert trades["alerts_ok"] and trades["alerts"]["expected"] > 0
    assert d["settings"]["not_named"] == [] and d["settings"]["cases"] >= 14
    assert d["failures"] == []


def test_fuzzed_structure_aware_input_through_every_other_reader(services_up):
    """`aldebaran chaos fuzz`'s other targets at a small size (the CLI's --short runs 200 per target, the full
    campaign 10,000): hostile alerts on `alerts` and `alerts.fast` through the dispatcher, the fast dispatcher
    and the lane reconciler; hostile stored objects of every kind through their readers, on MinIO; hostile
    connection extras through every channel kind's builder."""
    n = 50
    result = fuzz.run(seed=4, mode="short", inputs=n, targets=("alerts", "store", "extras"))
    d = result.details
    log.info("fuzz readers (short): %s", json.dumps(d, default=str)[:4000])
    assert d["failures"] == []
    alerts = d["alerts"]
    assert alerts["crashes"] == [] and alerts["hostile_per_topic"] == n and alerts["of_which_structure_aware"] > 0
    assert alerts["exact_dispatcher"]["malformed_seen"] == alerts["fast_dispatcher"]["malformed_seen"] == n
    assert alerts["dead_letters"] == {"dispatcher:alerts": n, "dispatcher:fast": n, "reconciler:alerts": n,
                                      "reconciler:fast": n} and alerts["dead_letters_without_reason"] == 0
    assert alerts["reconciler"]["rejected"] == 2 * n and alerts["reconciler"]["unconfirmed"] == 0
    assert alerts["good_delivered"] == alerts["good_sent"] and alerts["good_delivered_once"]  # once across lanes
    assert set(d["store"]) == {"records", "index_keys", "runs", "owners", "heartbeats", "leases", "plans"}
    for kind, r in d["store"].items():
        assert r["inputs"] == n and r["crashes"] == 0 and r["unaccounted"] == 0, (kind, r)
        assert r["quarantined"] + r["reported"] > n // 4, (kind, r)  # many inputs are corrupt, each set aside
    assert len(d["extras"]) == 10
    for kind, r in d["extras"].items():
        assert r["inputs"] == n and r["crashes"] == 0 and r["reported"] > 0, (kind, r)
    assert (result.lost, result.duplicated) == (0, 0)


def test_kafka_broker_and_minio_killed_on_private_services(services_up):
    """A private Kafka broker and MinIO (own ports and run dir; the shared ones are not touched), each
    SIGKILLed for a few seconds mid-stream and restarted: the auditor recovers and its alerts equal the
    reference. (The HA profile's broker kill under load, with a replica taking over, is `make chaos-ha`.)"""
    result = outages.run(events=5_000, kafka_down=5.0, minio_down=5.0, seed=5, mode="short", kill=True)
    log.info("outages (short): %s", json.dumps(result.details, default=str)[:3000])
    assert result.details["failures"] == []
    scenarios = [r for r in result.rows if r["faults"]]
    assert [r["scenario"] for r in scenarios] == ["kafka SIGKILLed, down 5 s", "minio SIGKILLed, down 5 s"]
    for r in scenarios:
        assert r["ok"] and r["lost"] == 0 and r["alerts_topic"]["extra"] == 0
        assert r["recovery_s"] > 0


@pytest.mark.campaign
def test_airflow_scheduler_killed_while_alert_dispatch_runs():
    """Needs no shared service: a private Airflow (own home, SQLite, LocalExecutor, api-server on 18080) and a
    private Kafka/MinIO (19192/19193, 19100);
    the scheduler is SIGKILLed with every process under it while `alert_dispatch` task instances run, restarted
    after a pause; every alert reaches the webhook once, no SMS twice, the killed task instances end in success."""
    result = kill_scheduler.run(alerts=300, kills=1, seed=6, mode="short", **kill_scheduler.SHORT)
    d = result.details
    log.info("kill-scheduler (short): %s", json.dumps(d, default=str)[:4000])
    assert d["failures"] == []
    assert [k["mode"] for k in d["kills"]] == ["tree"] and d["scheduler_starts"] == 2
    killed = d["kills"][0]
    assert killed["running_at_kill"], "the kill must land while task instances run"
    assert all(f["final_state"] == "success" for f in killed["running_at_kill"])
    assert 0 < killed["restart_to_heartbeat_s"] <= killed["restart_to_next_ti_finished_s"]
    assert d["webhook"]["accepted"] == 300 and d["webhook"]["statuses"].get(201) == 300 and d["webhook"]["lost"] == 0
    assert d["sms"]["texts_sent_twice"] == 0 and d["sms"]["lost"] == 0
    assert d["sms"]["delivered"] + d["sms"]["in_doubt"] == 300
    assert (result.lost, result.duplicated) == (0, 0)


@pytest.mark.campaign
def test_airflow_triggerer_killed_idle_and_busy_while_the_asset_watcher_drives_dispatch():
    """A private Airflow with a triggerer (the alert_dispatch AssetWatcher wakes the DAG; no REST triggering),
    the triggerer SIGKILLed once with no run active (a wave published while it is down) and once while a dispatch
    task instance delivers; every alert reaches every recipient once, the waves arrive after the restart."""
    result = kill_airflow.run("triggerer", alerts=300, kills=2, seed=9, mode="short", **kill_airflow.SHORT["triggerer"])
    d = result.details
    log.info("kill-triggerer (short): %s", json.dumps(d, default=str)[:4000])
    assert d["failures"] == []
    assert [k["mode"] for k in d["kills"]] == ["idle", "busy"] and d["component_starts"] == 3
    for k in d["kills"]:
        assert 0 < k["restart_to_healthy_s"] and k["wave_published_to_all_received_s"] is not None
    # The campaign's sweep cron is out of its window: the idle kill's wave came through the restarted watcher.
    idle = d["kills"][0]
    assert idle["restart_to_watcher_run_s"] is not None
    assert {t for _, t in idle["dag_runs_after_restart"]} == {"asset_triggered"}
    assert d["dag_runs_by_type"].get("asset_triggered", 0) >= 1
    assert d["webhook"]["accepted"] == 300 and d["webhook"]["lost"] == 0
    assert d["sms"]["texts_sent_twice"] == 0 and d["sms"]["lost"] == 0
    assert d["sms_lookup"]["delivered"] == 300 and d["sms_lookup"]["texts_sent_twice"] == 0
    assert (result.lost, result.duplicated) == (0, 0)


@pytest.mark.campaign
def test_airflow_api_server_killed_while_dispatch_task_instances_run():
    """The api-server (the task processes' Execution API) SIGKILLed while dispatch task instances run, down
    beyond the task supervisor's failed heartbeats, then briefly; every alert reaches every recipient once and
    the task instances running at the kills end in success (retried if need be)."""
    result = kill_airflow.run("api-server", alerts=300, kills=2, seed=10, mode="short",
                              **kill_airflow.SHORT["api-server"])
    d = result.details
    log.info("kill-api-server (short): %s", json.dumps(d, default=str)[:4000])
    assert d["failures"] == []
    assert [k["mode"] for k in d["kills"]] == ["long", "short"] and d["component_starts"] == 3
    assert all(k["running_at_kill"] for k in d["kills"]), "each kill must land while task instances run"
    # The tries in flight fail (no Execution API); two kills leave the DAG's last retry to succeed.
    assert all(f["final_state"] == "success" for k in d["kills"] for f in k["running_at_kill"])
    assert d["webhook"]["accepted"] == 300 and d["webhook"]["lost"] == 0
    assert d["sms"]["texts_sent_twice"] == 0 and d["sms"]["lost"] == 0
    assert d["sms_lookup"]["delivered"] == 300 and d["sms_lookup"]["texts_sent_twice"] == 0
    assert (result.lost, result.duplicated) == (0, 0)


def test_a_warm_standby_takes_over_a_killed_auditor(services_up):
    """The failover campaign at its smallest: an active auditor and a warm standby on one s3a:// checkpoint,
    the active SIGKILLed mid-stream once; the standby takes the lease and goes on, and the alerts topic
    equals the reference (nothing lost or changed). No cold baseline: the campaign below has one."""
    from aldebaran_lab.chaos import failover

    # Micro-batches of 50 trades: 400 of them outlast the standby's start and the wait before the kill even
    # on a quiet box, where a small batch takes ~0.1 s (10,000 trades in batches of 100 drained first there);
    # the standby that takes over catches up in large ones.
    result = failover.run(events=20_000, kills=1, cold=0, seed=5, mode="short", max_offsets=50,
                          catch_up_offsets=20_000)
    log.info("failover (smallest): %s", json.dumps(result.details, default=str)[:4000])
    d = result.details
    assert d["failures"] == [] and result.lost == 0 and result.duplicated == 0
    assert d["alerts_topic"]["missing"] == 0 and d["alerts_topic"]["extra"] == 0 and d["alerts_topic"]["changed"] == 0
    assert d["alerts_topic"]["expected"] > 100
    assert len(d["warm_s"]) == 1 and d["cold_s"] == [] and result.runs == 2  # the active and the standby only


@pytest.mark.campaign
def test_a_warm_standby_takes_over_a_killed_auditor_faster_than_a_cold_restart(services_up):
    """`aldebaran chaos failover --short`: an active auditor and a warm standby (--standby true) on one checkpoint;
    the active is SIGKILLed mid-stream, the standby takes over; then a kill with a cold restart (the baseline).
    Nothing is lost or changed on the alerts topic. The times are the campaign's measurement, not a test: only
    their order is asserted (a standby that waited for nothing would still be far faster than a JVM start)."""
    from aldebaran_lab.chaos import failover

    result = failover.run(events=20_000, kills=1, cold=1, seed=5, mode="short")
    log.info("failover (short): %s", json.dumps(result.details, default=str)[:4000])
    d = result.details
    assert d["failures"] == [] and result.lost == 0 and result.duplicated == 0
    assert d["alerts_topic"]["missing"] == 0 and d["alerts_topic"]["extra"] == 0 and d["alerts_topic"]["changed"] == 0
    assert len(d["warm_s"]) == 1 and len(d["cold_s"]) == 1
    assert d["warm_s"][0] < d["cold_s"][0]


@pytest.mark.campaign
def test_a_killed_dispatcher_is_not_restarted_and_the_other_takes_its_partitions_fenced(services_up):
    """`aldebaran chaos dispatch-failover --short`: two streaming dispatchers (webhook + Kafka bus) share each
    channel's partitions through the consumer groups, session timeout 6 s. One is frozen for 8 s (SIGSTOP, longer
    than the session: the broker expels it, the other takes its partitions with a higher owner epoch, and the
    resumed one must not write past it), then one is SIGKILLed and not restarted: the survivor delivers the dead
    one's partitions. Every alert reaches each recipient once. Marked `campaign` (~45-90 s with the dispatcher
    starts); the gaps are the campaign's measurement, not asserted here. The fence itself stays in `make test`:
    tests/integration/test_dispatch_fencing.py (a frozen dispatcher's record refused, nothing received twice)."""
    from aldebaran_lab.chaos import dispatch_failover

    result = dispatch_failover.run(timeouts_ms=[6000], kills=1, stalls_s=[8.0], rate=50.0, seed=4, mode="short")
    d = result.details
    log.info("dispatch-failover (short): %s", json.dumps(d, default=str)[:4000])
    assert d["failures"] == [] and (result.lost, result.duplicated) == (0, 0)
    published = d["alerts_published"]
    assert published > 0
    assert d["webhook"]["accepted"] == published and d["webhook"]["statuses"].get(201) == published
    assert (d["bus"]["received"], d["bus"]["lost"], d["bus"]["duplicated"], d["bus"]["unexpected"]) == (published, 0, 0, 0)
    assert d["bus"]["ledger_not_delivered"] == 0
    s = d["per_timeout_ms"]["6000"]
    # A freeze longer than the session is an expulsion: the group rebalanced (a false failover), fenced by the epochs.
    assert [e["false_failover"] for e in s["stall_events"]] == [True]
    # The kill: the survivor took every dead partition and delivered from each of them again, on both channels.
    (kill,) = s["kills"]
    for ch in ("webhook", "bus"):
        assert kill["dead_partitions"][ch], ch
        assert kill[ch]["taken_s"] is not None and kill[ch]["all_s"] is not None, (ch, kill[ch])
