"""The platform at rest (aldebaran_lab.deployed_rest): each process's role from the command lines the platform's
code starts (aldebaran_capacity.bench.boxstate.platform_role), and the rest figures from cores per role."""

from __future__ import annotations

from aldebaran_capacity.bench.boxstate import platform_role
from aldebaran_lab.deployed_rest import summarise

VENV = "/work/main/.venv/bin"
AUDITOR_JVM = ["/usr/lib/jvm/java-17/bin/java", "-cp", "/x/jars/*", "-Xmx1g", "org.apache.spark.deploy.SparkSubmit",
               "--master", "local[2]", "--name", "aldebaran-auditor", "/work/main/spark_apps/auditor.py",
               "--checkpoint", "s3a://aldebaran/checkpoints/auditor"]
AUDITOR_DRIVER = [f"{VENV}/python", "/work/main/spark_apps/auditor.py", "--checkpoint", "s3a://x"]
LANE_JVM = ["/opt/spark-4.3/java", "org.apache.spark.deploy.SparkSubmit", "--master", "local[4]",
            "/work/main/spark_apps/realtime_lane.py", "--checkpoint", "/run/lanes/fast/gen-1"]
DAEMON = [f"{VENV}/python", "-m", "pyspark.daemon"]
SCHEDULER = [f"{VENV}/python", f"{VENV}/airflow", "scheduler"]


def test_the_auditors_processes():
    assert platform_role(AUDITOR_JVM) == "auditor JVM"
    assert platform_role(AUDITOR_DRIVER, [AUDITOR_JVM]) == "auditor driver"
    assert platform_role(DAEMON, [AUDITOR_JVM]) == "spark python workers"
    assert platform_role(DAEMON, [DAEMON, AUDITOR_JVM]) == "spark python workers"  # a forked worker
    shard = [f"{VENV}/python", "-m", "aldebaran.audit.sparkjob.shardhost", "/tmp/s.sock", "0", "60"]
    assert platform_role(shard, []) == "spark python workers"  # orphaned: only ever the auditor's
    assert platform_role([f"{VENV}/python", "-m", "aldebaran.platform.detached_submit"]) == "auditor submit"


def test_the_lanes_processes_are_not_the_auditors():
    assert platform_role(LANE_JVM) == "lane JVM"
    assert platform_role(["/opt/py/python3", "/work/main/spark_apps/realtime_lane.py", "--x"], [LANE_JVM]) == "lane driver"
    assert platform_role(DAEMON, [LANE_JVM]) == "lane python workers"
    assert platform_role([f"{VENV}/python", f"{VENV}/aldebaran", "lanes", "run"]) == "lane keeper"


def test_dispatchers_are_named_as_the_supervisor_names_them():
    cmd = [f"{VENV}/python", f"{VENV}/aldebaran", "dispatch", "--follow", "--name", "log", "--channel", "log"]
    assert platform_role(cmd) == "dispatcher log"
    fast = [f"{VENV}/python", f"{VENV}/aldebaran", "dispatch", "--follow", "--name", "fast-lane", "--fast",
            "--channel", "webhook", "--channel", "bus"]
    assert platform_role(fast) == "dispatcher fast-lane"
    one_shot = [f"{VENV}/python", f"{VENV}/aldebaran", "dispatch", "--channel", "log"]
    assert platform_role(one_shot, [["airflow worker -- 0190-ti"]]) == "airflow tasks"


def test_services_and_airflow():
    kafka = ["/usr/bin/java", "-Xms256m", "-cp", "/k/libs/kafka_2.13.jar", "kafka.Kafka", "/run/kafka/server.properties"]
    assert platform_role(kafka) == "kafka"
    assert platform_role(["/root/go/bin/minio", "server", "/run/minio", "--address", "127.0.0.1:9000"]) == "minio"
    assert platform_role(SCHEDULER) == "airflow scheduler"
    assert platform_role([f"{VENV}/python", f"{VENV}/airflow", "dag-processor"]) == "airflow dag-processor"
    assert platform_role(["airflow api_server -- host:127.0.0.1 port:8080"]) == "airflow api-server"
    assert platform_role(["[ready] airflow api-server worker"]) == "airflow api-server"
    assert platform_role([f"{VENV}/python", f"{VENV}/airflow", "triggerer"]) == "airflow triggerer"
    assert platform_role(["airflow worker -- LocalExecutor: <idle>"], [SCHEDULER]) == "airflow scheduler"
    assert platform_role(["airflow worker -- LocalExecutor: dispatch_supervisor.supervise"]) == "airflow tasks"
    assert platform_role(["airflow supervisor: ti 0190"]) == "airflow tasks"
    assert platform_role(["airflow serve-logs"], [SCHEDULER]) == "airflow scheduler"
    spawned = [f"{VENV}/python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"]
    assert platform_role(spawned, [[f"{VENV}/python", f"{VENV}/airflow", "api-server"]]) == "airflow api-server"


def test_the_bench_and_anything_else():
    assert platform_role(DAEMON, [AUDITOR_JVM], bench=True) == "bench"
    assert platform_role(["/usr/bin/go", "build", "./..."], [["bash"]]) == "other"


def test_the_rest_total_is_the_platforms_roles_only():
    rest = summarise({"auditor JVM": 0.02, "auditor driver": 0.01, "spark python workers": 0.005, "kafka": 0.1,
                      "airflow scheduler": 0.05, "bench": 0.4, "other": 0.25})
    assert rest["total_cores"] == 0.185  # not the bench's 0.4 nor other's 0.25
    assert rest["exact_auditor_cores"] == 0.035
    assert rest["quiet"] is False and rest["other_cores"] == 0.25 and rest["bench_cores"] == 0.4
    assert list(rest["roles"])[0] == "bench"  # busiest first
    assert summarise({"kafka": 0.1, "other": 0.2})["quiet"] is True


def test_the_rest_sample_waits_for_the_platform_to_be_idle():
    """A previous bench's deliveries still going out are load, not rest: wait_idle polls until nothing is left."""
    from aldebaran_lab.deployed_rest import wait_idle

    left = [{"auditor": 120, "aldebaran-dispatch-log on alerts": 40}, {"auditor": 0, "x on alerts": 3}, {"auditor": 0}]
    seen = []

    def fake_backlog():  # failure injection: a backlog that drains in three polls
        seen.append(1)
        return left[len(seen) - 1]

    waited, still = wait_idle(fake_backlog, max_wait=60, step=0.01)
    assert still == {} and len(seen) == 3 and waited < 60


def test_a_platform_that_never_gets_idle_is_sampled_and_named():
    from aldebaran_lab.deployed_rest import wait_idle

    waited, still = wait_idle(lambda: {"auditor": 7, "idle": 0}, max_wait=0.05, step=0.01)
    assert still == {"auditor": 7} and waited > 0.05


def test_several_rest_runs_give_the_median_and_the_spread_with_the_median_runs_breakdown():
    from aldebaran_lab.deployed_rest import combine

    def sample(total: float, exact: float, kafka: float) -> dict:
        return {"total_cores": total, "exact_auditor_cores": exact, "roles": {"kafka": kafka}, "other_cores": 0.01,
                "quiet": True, "seconds": 60.0}

    runs = [sample(0.30, 0.04, 0.10), sample(0.20, 0.09, 0.05), sample(0.25, 0.05, 0.07)]
    got = combine(runs)
    # each figure its own median; the roles are the run whose total is the median (the third)
    assert (got["total_cores"], got["exact_auditor_cores"]) == (0.25, 0.05)
    assert got["total_cores_spread"] == [0.20, 0.30] and got["exact_auditor_cores_spread"] == [0.04, 0.09]
    assert got["roles"] == {"kafka": 0.07} and got["breakdown_run"] == 3 and got["quiet"] is True
    assert [r["total_cores"] for r in got["runs"]] == [0.30, 0.20, 0.25]
    assert combine([*runs[:2], {**runs[2], "quiet": False}])["quiet"] is False
    assert combine(runs[:1]) == runs[0]  # one run: as it was, no spread
