"""Reliability campaigns (`aldebaran chaos ...`, `make chaos`): inject faults into the real platform and
hold the outcome to the independent reference model (aldebaran.audit.reference).

- ``kill-auditor``  SIGKILL the auditor (driver and its Spark JVM) at random moments of a replay, restart
  it from its s3a:// checkpoint, then dispatch to a counting webhook receiver: missing = duplicated =
  extra = 0 against the reference.
- ``kill-dispatch`` SIGKILL dispatch workers mid-batch, also between a send and its record: idempotent
  channels deliver once, SMS never twice (IN_DOUBT instead), nothing lost.
- ``outages``       a private Kafka and MinIO (own run dir and ports, never the shared ones) stopped
  mid-stream and restarted; recovery time measured.
- ``fuzz``          hypothesis-generated malformed and hostile payloads through the real auditor; structure-
  aware hostile input through every other reader: alerts and alerts.fast (dispatchers, lane reconciler),
  each object kind in the store, connection extras; malformed settings at start.

Each campaign returns a :class:`aldebaran_lab.chaos.common.CampaignResult`; the CLI writes its table into
docs/reliability.md. The test suite runs each with small parameters (tests/integration/test_chaos.py).
"""
