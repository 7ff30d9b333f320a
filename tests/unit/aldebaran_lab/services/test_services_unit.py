"""Pure pieces of the service supervisors (no processes started)."""

from __future__ import annotations

import base64
from unittest import mock

from aldebaran_lab.services import kafka


def test_cluster_id_never_starts_with_dash():
    # A UUID whose base64 starts with "-" (0xF8 high bits) must be redrawn:
    # kafka-storage would read "-t -abc" as a missing argument.
    dash_first = bytes([0xFB]) + bytes(15)
    assert base64.urlsafe_b64encode(dash_first).decode().startswith("-")
    fixed = bytes([0x10]) + bytes(15)
    uuids = iter([mock.Mock(bytes=dash_first), mock.Mock(bytes=fixed)])
    with mock.patch.object(kafka.uuid, "uuid4", side_effect=lambda: next(uuids)):
        cluster_id = kafka.new_cluster_id()
    assert cluster_id == base64.urlsafe_b64encode(fixed).rstrip(b"=").decode()
    assert len(cluster_id) == 22


def test_cluster_ids_are_distinct_and_safe():
    ids = {kafka.new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert not any(i.startswith("-") for i in ids)
