"""How every Kafka client of the platform behaves when a broker, a partition leader or a dispatcher is lost.

One place per client kind, each key with the reason for its value:

- :func:`librdkafka`: the confluent-kafka producers, consumers and admin clients (aldebaran.kafka.io,
  aldebaran.kafka.admin, the auditor's alert and DLQ sinks, the dispatchers, the lane's reconciler, replay,
  explain, health, and the ``kafka`` bus channel's producer);
- :func:`dispatcher_group`: the dispatchers' consumer group (how a dead dispatcher's partitions reach its
  partner), from the values the delivery side passes in;
- :func:`java`: the Java client under Spark's Kafka source and sink (the auditor, its warm standby, the
  low-latency lane), as ``kafka.``-prefixed options.

The values are the platform's defaults, the constants below (the group's are ALDEBARAN_DELIVERY_* settings,
read by the delivery side and passed in). They are the bottom layer of each client's configuration: the
platform's Kafka connection (aldebaran.kafka.conn) comes next, and its extra *is* the librdkafka
configuration, so a key of the same name there (or, for Spark, in its ``spark_kafka_options``) wins for that
cluster; a caller's own keys win over both. No setting repeats them under a name of ours. docs/reliability.md, "Kafka broker/leader loss and the dispatcher handover",
lists each key's library default, the value here and the gap it bounds.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["producer", "consumer", "admin"]
Role = Literal["source", "sink"]
KINDS = ("producer", "consumer", "admin")
ROLES = ("source", "sink")
MIN_HEARTBEAT_MS = 500

# The failover values, each under the key it sets (why each, and the library default it replaces: below).
METADATA_REFRESH_MS = 5_000
RECONNECT_BACKOFF_MS, RECONNECT_BACKOFF_MAX_MS = 100, 1_000
RETRY_BACKOFF_MS, RETRY_BACKOFF_MAX_MS = 100, 1_000
REQUEST_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_MS = 10_000
API_TIMEOUT_MS = 60_000  # at least REQUEST_TIMEOUT_MS
DELIVERY_TIMEOUT_MS = 300_000  # at least a minute and 3 x REQUEST_TIMEOUT_MS


def librdkafka(kind: Kind) -> dict[str, object]:
    """The failover keys of one librdkafka client of `kind` (producer-only keys on producers only:
    librdkafka warns about a producer key given to a consumer)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    conf: dict[str, object] = {
        # A periodic refresh finds a partition's new leader even when the old leader's connection hangs
        # without an error (its host is gone and nothing resets the socket); a lost connection or a
        # NOT_LEADER answer triggers a refresh at once anyway. Library default 300 s.
        "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
        # Cached metadata is trusted for three refreshes, librdkafka's own ratio (default 900 s).
        "metadata.max.age.ms": 3 * METADATA_REFRESH_MS,
        # A broker that comes back after a restart is reached again within ~1 s. Library default max 10 s,
        # plus up to 50 % jitter: the partitions whose leadership returns to it would wait up to 15 s.
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        # After a leader is lost, metadata is asked again from retry.backoff.ms, doubling up to
        # retry.backoff.max.ms (topic.metadata.refresh.fast.interval.ms follows retry.backoff.ms): the new
        # leader is seen at most that long after its election. Failed produce and commit requests are
        # retried at the same pace. The library's defaults (100 ms / 1 s), named here.
        "retry.backoff.ms": RETRY_BACKOFF_MS,
        "retry.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
        # A request to a broker that died without closing its connections (host down, network cut) fails
        # after this instead of a minute (library default 60 s); the connection is closed and the request
        # retried on the partition's current leader. A fetch waits fetch.wait.max.ms more.
        "socket.timeout.ms": REQUEST_TIMEOUT_MS,
        # A connection to a host that does not answer is given up after this (library default 30 s).
        "socket.connection.setup.timeout.ms": CONNECT_TIMEOUT_MS,
    }
    if kind == "producer":
        conf.update({
            # acks=all and ordered retries without duplicates: a leader election costs a retry, never a
            # message or a copy. (Library default off.)
            "enable.idempotence": True,
            # A message fails only after this: far longer than a leader election (the dead broker's session,
            # a controller election, a metadata refresh: seconds), so an election delays messages and never
            # drops one. The library's default (300 s), named here.
            "message.timeout.ms": DELIVERY_TIMEOUT_MS,
        })
    return conf


def heartbeat_ms(session_timeout_ms: int) -> int:
    """A fifth of the session: a live member misses four heartbeats before it is expelled, and a
    survivor hears of a rebalance within this of the coordinator starting it."""
    return max(MIN_HEARTBEAT_MS, session_timeout_ms // 5)


def dispatcher_group(*, session_timeout_ms: int, assignment_strategy: str,
                     max_poll_interval_ms: int) -> dict[str, object]:
    """The consumer-group keys of a dispatcher (streaming or one pass: one group per channel, one protocol),
    from its delivery settings' values."""
    return {
        # The coordinator learns that a SIGKILLed dispatcher is gone only when its session expires: then its
        # partitions move to a live member. The broker refuses less than group.min.session.timeout.ms
        # (6 s by default). Library default 45 s.
        "session.timeout.ms": session_timeout_ms,
        # Library default 3 s (heartbeat_ms).
        "heartbeat.interval.ms": heartbeat_ms(session_timeout_ms),
        # Cooperative rebalancing moves only the partitions that change owner: the survivor keeps delivering
        # its own through the dead member's expiry and through the restarted member's return, instead of
        # revoking them all and taking them anew (each new partition costs an owner epoch and a read of
        # its recent runs). Library default range,roundrobin (eager: every member revokes every partition).
        # Every member of a group must use the same protocol.
        "partition.assignment.strategy": assignment_strategy,
        # How long a rebalance may wait for a member that stopped polling, and how long without a poll a
        # member stays in the group. A kill's handover waits for it only if a survivor is stuck in one
        # iteration that long; a lower value would expel slow but live dispatchers mid-send (a channel's
        # poll of up to ALDEBARAN_DELIVERY_POLL_MAX alerts). The library's default (300 s), named here.
        "max.poll.interval.ms": max_poll_interval_ms,
    }


def java(role: Role) -> dict[str, str]:
    """The failover options of Spark's Kafka `role` ("source": consumers on the executors and the driver's
    admin client; "sink": the producers), ``kafka.``-prefixed. The Java defaults named are kafka-clients
    3.9's, the client Spark 4.2's connector brings. Spark forbids or overrides none of these keys (it
    forbids group.id, auto.offset.reset, the (de)serializers, enable.auto.commit, interceptor.classes)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    conf: dict[str, object] = {
        # Periodic refresh (Java default 300 s), as librdkafka's topic.metadata.refresh.interval.ms above.
        "metadata.max.age.ms": METADATA_REFRESH_MS,
        # Java defaults 50 ms / 1 s: the same pace as the confluent-kafka clients.
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        # Java defaults 100 ms / 1 s: metadata after a leader loss and failed requests, as above.
        "retry.backoff.ms": RETRY_BACKOFF_MS,
        "retry.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
        # A request to a silently dead broker fails after this (Java default 30 s), as socket.timeout.ms above.
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
        # Connection setup, and its cap: the Java client doubles the first per failed attempt up to the
        # max (defaults 10 s / 30 s); a host that stays away is tried at the first pace.
        "socket.connection.setup.timeout.ms": CONNECT_TIMEOUT_MS,
        "socket.connection.setup.timeout.max.ms": CONNECT_TIMEOUT_MS,
    }
    if role == "source":
        # How long the driver's offset lookups and an executor's blocking calls retry (at retry.backoff.*)
        # before they fail the batch; a leader election ends long before. The Java default (60 s), named.
        conf["default.api.timeout.ms"] = API_TIMEOUT_MS
    else:
        # As message.timeout.ms above; the Java default is 120 s. Must exceed linger.ms + request.timeout.ms.
        conf["delivery.timeout.ms"] = DELIVERY_TIMEOUT_MS
    return {f"kafka.{key}": str(value) for key, value in conf.items()}
