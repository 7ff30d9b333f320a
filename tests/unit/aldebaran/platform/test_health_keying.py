"""platform health's keying check: a warning, never a red verdict, when the auditor's recent misrouted
share is over ALDEBARAN_HEALTH_MAX_MISROUTED_SHARE; silent when the contract holds or nothing ran yet."""

from __future__ import annotations

from aldebaran.platform.health_checks import check_keying


def _hb(share, partitioner="crc32"):
    return {"books": {"misrouted_share_recent": share, "partitioner": partitioner}}


def test_a_high_misrouted_share_warns_naming_the_setting_and_the_partitioner():
    out = check_keying(_hb(0.48, "murmur2"), 0.10)
    assert out["ok"] is True
    assert "48%" in out["warning"] and "murmur2" in out["warning"]
    assert "ALDEBARAN_HEALTH_MAX_MISROUTED_SHARE" in out["warning"]


def test_a_share_at_or_under_the_limit_is_quiet():
    assert "warning" not in check_keying(_hb(0.10), 0.10)
    assert "warning" not in check_keying(_hb(0.0), 0.10)


def test_no_heartbeat_or_no_events_yet_is_quiet():
    assert "warning" not in check_keying(None, 0.10)
    assert "warning" not in check_keying(_hb(None), 0.10)
