"""The HA profile's configuration (services.ha): pure generation only, no process is started."""

from __future__ import annotations

import stat
from pathlib import Path
from unittest import mock

import pytest

from aldebaran.runtime import envfile
from aldebaran.settings import KafkaSettings, ObjectStoreSettings
from aldebaran_lab.services import ha
from aldebaran_lab.services.ha import profile
from aldebaran_lab.services.ha.airflow import AirflowPart, airflow_env, component_ports
from aldebaran_lab.services.ha.members import KafkaNode, MinIOBalancer, MinIONode
from aldebaran_lab.services.kafka import server_properties
from aldebaran_lab.services.postgres import server_options

# What the core profile binds (docs/operations.md): the HA profile must not touch any of it.
CORE_PORTS = {9092, 9093, 9000, 8080, 7077, 8081, 8082, 8083, 8974, 8793, 8794}


def layout_ports(layout: profile.Layout) -> list[int]:
    return [*layout.kafka_ports, *layout.controller_ports, *layout.minio_ports, layout.postgres_port,
            layout.airflow_port, *layout.scheduler_health_ports, layout.spark_port, layout.spark_ui_port,
            *layout.spark_worker_ui_ports]


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_ports_are_distinct_and_apart_from_the_core_services():
    ports = layout_ports(profile.LAYOUT)
    assert len(ports) == len(set(ports))
    assert not set(ports) & CORE_PORTS


def test_members_one_per_process_in_dependency_order():
    names = ha.names()
    assert names == (
        "postgres", "kafka-1", "kafka-2", "kafka-3", "minio-1", "minio-2", "minio-3", "minio-4",
        "minio-lb", "spark-master", "spark-worker-1", "spark-worker-2", "airflow-api-server", "airflow-dag-processor",
        "airflow-scheduler-1", "airflow-scheduler-2", "airflow-triggerer-1", "airflow-triggerer-2",
    )
    groups = profile.LAYOUT.groups()
    assert list(groups) == ["postgres", "kafka", "minio", "spark", "airflow"]
    assert sum(len(g) for g in groups.values()) == len(names)


@pytest.mark.parametrize("kwargs", [
    {"replication_factor": 3, "min_insync_replicas": 3},  # no broker may die
    {"kafka_ports": (1, 2), "controller_ports": (3, 4)},  # replication 3 on 2 brokers
    {"minio_ports": (1, 2, 3)},  # below MinIO's erasure-coding minimum of 4 drives
    {"controller_ports": (1, 2)},
])
def test_layouts_that_cannot_lose_a_member_are_refused(kwargs):
    with pytest.raises(ValueError):
        profile.Layout(**kwargs)


def test_env_values_generate_secrets_once_and_derive_addresses(tmp_path):
    values = profile.env_values({}, run_root=tmp_path)
    for key in [*envfile.GENERATED, profile.POSTGRES_PASSWORD]:
        assert values[key], key
    assert values["ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS"] == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert values["ALDEBARAN_KAFKA_REPLICATION_FACTOR"] == "3"
    assert values["ALDEBARAN_S3_ENDPOINT_URL"] == "http://127.0.0.1:19010"  # the balancer, not a node
    assert values["ALDEBARAN_AIRFLOW_PORT"] == "19080"
    assert values["ALDEBARAN_SPARK_MASTER"] == "spark://127.0.0.1:19077"
    assert values["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == (
        f"postgresql+psycopg2://aldebaran:{values[profile.POSTGRES_PASSWORD]}@127.0.0.1:19432/airflow")
    # A second generation keeps every secret; a stale address is rewritten.
    again = profile.env_values({**values, "ALDEBARAN_S3_ENDPOINT_URL": "http://elsewhere:1"}, run_root=tmp_path)
    assert again == values


def test_the_env_file_is_private_stable_and_configures_the_product(tmp_path, monkeypatch):
    path = tmp_path / ".env.ha"
    first = profile.ensure_env(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert profile.ensure_env(path) == first == profile.read_env(path)
    for key, value in first.items():
        monkeypatch.setenv(key, value)
    assert KafkaSettings().replication_factor == 3
    assert len(KafkaSettings().bootstrap_servers.split(",")) == 3
    s3 = ObjectStoreSettings()
    assert s3.endpoint() == "http://127.0.0.1:19010"
    assert s3.access_key.get_secret_value() == first["ALDEBARAN_S3_ACCESS_KEY"]


def test_the_core_broker_config_is_unchanged_by_the_refactor(tmp_path):
    conf = props(server_properties(node_id=1, host="127.0.0.1", port=9092, controller_port=9093, data=tmp_path,
                                   settings=KafkaSettings(), quorum="controller.quorum.bootstrap.servers=127.0.0.1:9093"))
    assert conf["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert conf["offsets.topic.replication.factor"] == conf["default.replication.factor"] == "1"
    assert conf["min.insync.replicas"] == conf["transaction.state.log.min.isr"] == "1"


def test_each_broker_is_a_voter_of_one_quorum_with_replication_3_and_min_isr_2(tmp_path):
    layout = profile.LAYOUT
    configs = [props(server_properties(
        node_id=i, host="127.0.0.1", port=layout.kafka_ports[i - 1], controller_port=layout.controller_ports[i - 1],
        data=tmp_path / f"kafka-{i}", settings=KafkaSettings(),
        quorum=f"controller.quorum.voters={layout.controller_voters()}", replicas=3, min_insync=2))
        for i in (1, 2, 3)]
    assert {c["controller.quorum.voters"] for c in configs} == {
        "1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194"}
    assert [c["node.id"] for c in configs] == ["1", "2", "3"]
    assert [c["listeners"] for c in configs] == [
        f"PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{c}"
        for p, c in zip(profile.LAYOUT.kafka_ports, profile.LAYOUT.controller_ports)]
    for c in configs:
        assert c["default.replication.factor"] == c["offsets.topic.replication.factor"] == "3"
        assert c["min.insync.replicas"] == c["transaction.state.log.min.isr"] == "2"
        assert c["unclean.leader.election.enable"] == "false"


def test_ha_brokers_fence_a_dead_broker_in_seconds(tmp_path):
    node = KafkaNode(1, root=tmp_path, layout=profile.LAYOUT)
    with mock.patch.object(KafkaNode, "_run_tool"):  # storage formatting: not this test's business
        node.prepare()
    conf = props(node.config.read_text())
    assert conf["broker.session.timeout.ms"] == "3000"  # Kafka's default: 9000
    assert conf["broker.heartbeat.interval.ms"] == "500"
    assert conf["replica.lag.time.max.ms"] == "10000"


def test_the_s3_balancer_spreads_over_every_node_and_checks_each(tmp_path):
    lb = MinIOBalancer(root=tmp_path, layout=profile.LAYOUT)
    cfg = lb.render()
    assert "bind 127.0.0.1:19010" in cfg and "option redispatch" in cfg
    assert [line.split()[2] for line in cfg.splitlines() if line.strip().startswith("server ")] == [
        "127.0.0.1:19000", "127.0.0.1:19001", "127.0.0.1:19002", "127.0.0.1:19003"]
    assert cfg.count(" check") == 4 and "GET /minio/health/live" in cfg
    # its status page, where `chaos ha` sees when a node is taken out
    assert "bind 127.0.0.1:19011" in cfg and "stats uri /stats" in cfg


def test_kafka_nodes_share_one_cluster_id(tmp_path):
    nodes = [KafkaNode(i, root=tmp_path, layout=profile.LAYOUT) for i in (1, 2, 3)]
    assert len({n.cluster_id() for n in nodes}) == 1
    assert [n.pidfile for n in nodes] == [tmp_path / f"kafka-{i}" / f"kafka-{i}.pid" for i in (1, 2, 3)]
    assert nodes[0].heap()[-1] == profile.LAYOUT.kafka_heap


def test_topics_are_created_with_the_configured_replication_factor():
    from aldebaran.kafka import admin as kadmin

    client, listed = mock.Mock(), {}  # ensure_topics waits until the metadata lists what it created

    def create(new, **_):
        listed.update({t.topic: mock.Mock(error=None, partitions={0: None}) for t in new})
        return {}

    client.list_topics.side_effect = lambda *a, **k: mock.Mock(topics=dict(listed))
    client.create_topics.side_effect = create
    with mock.patch.object(kadmin, "admin", return_value=client):
        kadmin.ensure_topics(KafkaSettings(replication_factor=3))
    new_topics = client.create_topics.call_args.args[0]
    assert [t.replication_factor for t in new_topics] == [3, 3, 3]


def test_every_minio_node_gets_the_same_endpoints_each_with_its_own_drive(tmp_path):
    values = {"ALDEBARAN_S3_ACCESS_KEY": "k", "ALDEBARAN_S3_SECRET_KEY": "s" * 20}
    nodes = [MinIONode(i, root=tmp_path, layout=profile.LAYOUT, env=values) for i in (1, 2, 3, 4)]
    endpoints = profile.LAYOUT.minio_endpoints(tmp_path)
    assert endpoints[0] == f"http://127.0.0.1:19000{tmp_path}/minio-1/data"
    assert len({e.split("/", 3)[2] for e in endpoints}) == 4  # four host:port
    assert len({e.split("/", 3)[3] for e in endpoints}) == 4  # four drives
    with mock.patch("aldebaran.runtime.paths.minio_binary", return_value=Path("/bin/minio")):
        for node in nodes:
            cmd = node.command()
            assert cmd[cmd.index("--address") + 1] == node.address
            assert cmd[-4:] == endpoints
            env = node.environment()
            assert env["_MINIO_SERVER_LOCAL"] == node.address
            assert env["MINIO_ROOT_USER"] == "k"


def test_postgres_listens_on_loopback_with_its_own_socket_dir(tmp_path):
    opts = server_options(host="127.0.0.1", port=19432, socket_dir=tmp_path)
    settings = dict(opts[i + 1].split("=", 1) for i in range(0, len(opts), 2))
    assert settings["listen_addresses"] == "127.0.0.1"
    assert settings["port"] == "19432"
    assert settings["unix_socket_directories"] == str(tmp_path)


def test_airflow_components_share_postgres_and_keep_their_ports_apart(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_ALERTS_WATCHER", raising=False)
    monkeypatch.setenv("ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")  # the caller's core profile
    values = profile.env_values({}, run_root=tmp_path)
    env = airflow_env(profile.LAYOUT, values, tmp_path / "home")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    assert env["AIRFLOW__API__PORT"] == "19080"
    assert '"bootstrap.servers": "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"' in env[
        "AIRFLOW_CONN_KAFKA_ALERTS_WATCHER"]
    health = [component_ports(f"airflow-scheduler-{i}", profile.LAYOUT) for i in (1, 2)]
    assert [h["AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT"] for h in health] == ["19974", "19975"]
    assert component_ports("airflow-triggerer-1", profile.LAYOUT) == {}
    with pytest.raises(Exception, match="Postgres"):
        airflow_env(profile.LAYOUT, {**values, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sqlite:///x"}, tmp_path)


def test_airflow_members_are_separate_processes_without_log_servers(tmp_path):
    values = profile.env_values({}, run_root=tmp_path)
    commands = {n: AirflowPart(n, root=tmp_path, layout=profile.LAYOUT, values=values).command()[1:]
                for n in ha.names() if n.startswith("airflow-")}
    assert commands["airflow-api-server"][:1] == ["api-server"]
    assert commands["airflow-dag-processor"] == ["dag-processor"]
    for name in ("airflow-scheduler-1", "airflow-scheduler-2", "airflow-triggerer-1", "airflow-triggerer-2"):
        assert commands[name] == [name.split("-")[1], "--skip-serve-logs"]


def test_every_member_has_its_own_pid_file_under_the_ha_root(tmp_path, monkeypatch):
    monkeypatch.setenv("ALDEBARAN_RUN_DIR", str(tmp_path))
    values = profile.env_values({}, run_root=tmp_path / "ha")
    members = [ha.member(n, values=values) for n in ha.names()]
    assert [m.name for m in members] == list(ha.names())
    pidfiles = [m.pidfile for m in members]
    assert len(set(pidfiles)) == len(pidfiles)
    assert all(p.is_relative_to(tmp_path / "ha") for p in pidfiles)
    with pytest.raises(KeyError, match="kafka-4"):
        ha.member("kafka-4", values=values)
