"""make test's order (tests/schedule.py): the files without services first, then integration files longest
first, a file's tests together."""

from __future__ import annotations

from tests import schedule


class Item:
    def __init__(self, path: str, name: str, services: bool = False) -> None:
        self.fspath = str(schedule.ROOT / path)
        self.name = name
        self.fixturenames = ["tmp_path", *(["services_up"] if services else [])]


def test_files_without_services_first_then_the_longest_integration_files(monkeypatch):
    monkeypatch.setattr(schedule, "durations", lambda: {"tests/integration/test_b.py": 90.0,
                                                        "tests/integration/test_c.py": 5.0,
                                                        "tests/integration/test_free.py": 60.0})
    monkeypatch.setattr(schedule, "SERVICE_FILES", set())
    items = [Item("tests/integration/test_a.py", "a1", True), Item("tests/unit/test_u.py", "u1"),
             Item("tests/integration/test_c.py", "c1", True), Item("tests/integration/test_b.py", "b1"),
             Item("tests/integration/test_a.py", "a2"), Item("tests/integration/test_b.py", "b2", True),
             Item("tests/dags/test_d.py", "d1"), Item("tests/integration/test_free.py", "f1")]
    schedule.order(items)
    # a file with one test that needs the services goes with them as a whole; unknown files after the known ones
    assert [i.name for i in items] == ["f1", "u1", "d1", "b1", "b2", "c1", "a1", "a2"]
    assert schedule.SERVICE_FILES == {"tests/integration/test_a.py", "tests/integration/test_b.py",
                                      "tests/integration/test_c.py"}


def test_durations_come_from_a_junit_file_per_test_file(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite>'
                     '<testcase classname="tests.integration.test_x" name="t1" time="1.5"/>'
                     '<testcase classname="tests.integration.test_x.TestGroup" name="t2" time="2.0"/>'
                     '<testcase classname="tests.unit.aldebaran.test_y" name="t3" time="0.1"/>'
                     '</testsuite></testsuites>')
    assert schedule.junit_durations(junit) == {"tests/integration/test_x.py": 3.5,
                                               "tests/unit/aldebaran/test_y.py": 0.1}
