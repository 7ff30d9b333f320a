"""The lane keeper's choice of checkpoint generation (pure: no process is started): a young generation is
resumed, an old one or none starts a new one, which reads from the latest trades unless it is the lane's first."""

from __future__ import annotations

from aldebaran.lanes.keeper import Keeper
from aldebaran.lanes.settings import LaneSettings

NOW = 1_800_000_000.0


def keeper(**settings) -> Keeper:
    cfg = LaneSettings(**{"checkpoint": "/ck/lane", "starting_offsets": "earliest", "rotate_seconds": 3600, **settings})
    return Keeper(cfg, kafka=None, store=None)


def test_the_first_generation_starts_where_the_settings_say():
    gen, offsets = keeper().pick_generation(None, NOW)
    assert gen == {"name": f"gen-{int(NOW * 1000)}", "started_at": NOW, "checkpoint": f"/ck/lane/gen-{int(NOW * 1000)}",
                   "fresh": True}
    assert offsets == "earliest"


def test_a_young_generation_is_resumed():
    previous = {"generation": {"name": "gen-1", "started_at": NOW - 3599, "checkpoint": "/ck/lane/gen-1"}}
    gen, _ = keeper().pick_generation(previous, NOW)
    assert gen == previous["generation"]


def test_an_old_generation_is_replaced_by_one_reading_the_latest_trades():
    previous = {"generation": {"name": "gen-1", "started_at": NOW - 3600, "checkpoint": "/ck/lane/gen-1"}}
    gen, offsets = keeper().pick_generation(previous, NOW)
    assert gen["checkpoint"] == f"/ck/lane/gen-{int(NOW * 1000)}" and offsets == "latest"


def test_without_rotation_a_generation_is_kept_forever():
    previous = {"generation": {"name": "gen-1", "started_at": 0, "checkpoint": "/ck/lane/gen-1"}}
    gen, _ = keeper(rotate_seconds=0).pick_generation(previous, NOW)
    assert gen["name"] == "gen-1"


def test_a_generation_under_another_checkpoint_root_is_not_resumed():
    previous = {"generation": {"name": "gen-1", "started_at": NOW, "checkpoint": "/elsewhere/gen-1"}}
    gen, _ = keeper().pick_generation(previous, NOW)
    assert gen["checkpoint"].startswith("/ck/lane/gen-")


def test_a_rotation_always_starts_a_new_generation_from_the_latest_trades():
    previous = {"generation": {"name": "gen-1", "started_at": NOW - 1, "checkpoint": "/ck/lane/gen-1"}}
    for k in (keeper(), keeper(rotate_seconds=0)):
        gen, offsets = k.pick_generation(previous, NOW, rotate=True)
        assert gen["name"] == f"gen-{int(NOW * 1000)}" and offsets == "latest"


def test_the_old_generation_stops_only_once_the_new_one_has_read_for_the_overlap():
    from aldebaran.lanes.keeper import retire_due

    starting = {"active": True, "status": {"message": "Initializing sources", "isTriggerActive": False}}
    reading = {"active": True, "status": {"message": "Processing new data", "isTriggerActive": True}}
    assert retire_due(None, None, 15, NOW) == (None, False)  # the new lane has not reported yet
    assert retire_due(starting, None, 15, NOW) == (None, False)
    assert retire_due({**reading, "active": False}, None, 15, NOW) == (None, False)
    assert retire_due(reading, None, 15, NOW) == (NOW, False)  # its first batch seen: the overlap starts
    assert retire_due(reading, NOW, 15, NOW + 14.9) == (NOW, False)
    assert retire_due(starting, NOW, 15, NOW + 15) == (NOW, True)  # once seen reading, time alone decides
