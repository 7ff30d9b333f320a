"""Trade → recipient on a fast channel, for ``aldebaran bench low-latency --fast-webhook``.

A webhook receiver in a process of its own (receivers/process.py), a channel ``fasthook`` defined the way a
user defines one (its ``AIRFLOW_CONN_ALDEBARAN_<NAME>`` variable: an http connection whose extra says ``"fast": true``)
and a streaming fast dispatcher (``aldebaran dispatch --fast --follow``) in its own process reading the bench's
lane topic, on a ledger prefix and consumer group of this run only. The receiver stamps each alert as it
accepts it; a segment's trade → recipient latency is that stamp minus the alert's ``trigger_event_ts``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from aldebaran.delivery.channels.connection import conn_env_var
from aldebaran.exceptions import AldebaranError
from aldebaran.settings import KafkaSettings

CHANNEL = "fasthook"


class FastWebhook:
    """The receiver and the fast dispatcher for the length of one lane run (a context manager)."""

    def __init__(self, kafka: KafkaSettings, fast_topic: str, log_path: Path, batch: int = 1) -> None:
        self.kafka, self.fast_topic, self.log_path, self.batch = kafka, fast_topic, log_path, batch
        self.tag = uuid.uuid4().hex[:8]
        self.receiver = None
        self._proc: subprocess.Popen | None = None

    def env(self, secret: str) -> dict[str, str]:
        conn = {"conn_type": "http", "host": self.receiver.url, "password": secret,
                "extra": {"fast": True, "timeout": 5, **({"batch": self.batch} if self.batch > 1 else {})}}
        return {**os.environ, conn_env_var(CHANNEL): json.dumps(conn), "ALDEBARAN_CHANNELS": CHANNEL,
                "ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC": self.fast_topic,
                "ALDEBARAN_DELIVERY_GROUP": f"bench-fast-{self.tag}",
                "ALDEBARAN_DELIVERY_PREFIX": f"bench/fast-{self.tag}/deliveries",
                "ALDEBARAN_DELIVERY_STATIC_MEMBERSHIP": "false"}

    def _start_at_the_end(self) -> None:
        """Commit the fast consumer group at the topic's end, as operations.md tells a user who opts a channel
        in: a new group starts at the earliest offset, and the lane's earlier segments are not this one's."""
        from confluent_kafka import TopicPartition

        from aldebaran.delivery.fast import GROUP_SUFFIX
        from aldebaran.kafka.io import consumer

        group = f"bench-fast-{self.tag}-{CHANNEL}{GROUP_SUFFIX}"
        c = consumer(self.kafka, group)
        try:
            parts = c.list_topics(self.fast_topic, timeout=10).topics[self.fast_topic].partitions
            ends = [TopicPartition(self.fast_topic, p, c.get_watermark_offsets(TopicPartition(self.fast_topic, p),
                                                                                timeout=10)[1]) for p in parts]
            c.commit(offsets=ends, asynchronous=False)
        finally:
            c.close()

    def __enter__(self) -> "FastWebhook":
        from aldebaran_capacity.receivers.process import ReceiverProcess

        self._start_at_the_end()
        secret = secrets.token_hex(16)
        self.receiver = ReceiverProcess("webhook", secret=secret).start()
        with open(self.log_path, "wb") as log_file:
            self._proc = subprocess.Popen(
                [str(Path(sys.executable).with_name("aldebaran")), "dispatch", "--fast", "--follow", "--channel", CHANNEL,
                 "--name", f"bench-fast-{self.tag}"],
                env=self.env(secret), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if self.receiver is not None:
            self.receiver.stop()

    def received(self) -> dict[str, float]:
        """alert id → when the receiver accepted it, epoch ms."""
        return {a: at * 1000 for a, at in (self.receiver.stats(summary=False).get("received_at") or {}).items()}

    def wait_for(self, alert_ids: set[str], timeout: float) -> dict[str, float]:
        """Wait until every one of `alert_ids` reached the receiver (or `timeout`); their receive times."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.received()
            if alert_ids <= got.keys() or time.monotonic() > deadline:
                return {a: at for a, at in got.items() if a in alert_ids}
            if self._proc.poll() is not None:
                raise AldebaranError(f"the fast dispatcher exited with {self._proc.returncode}: see {self.log_path}")
            time.sleep(0.5)
