"""The package as pip sees it: pyproject.toml's pins equal requirements.txt's, setup.py's entry points follow
the packages present, and `aldebaran` finds its extension commands through them."""

from __future__ import annotations

import logging
import runpy
import shutil
import tomllib
from importlib.metadata import EntryPoint, entry_points

import pytest
import setuptools
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from aldebaran.cli import main as cli
from aldebaran.runtime import cliparse, paths
from aldebaran.runtime.cliparse import subcommands

ROOT = paths.ROOT
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins(lines) -> dict[str, str]:
    reqs = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): str(r.specifier) for r in reqs if canonicalize_name(r.name) != "aldebaran"}


def test_pyproject_pins_what_requirements_txt_pins():
    lines = [ln.split("#", 1)[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    venv = pins(ln for ln in lines if ln)
    declared = pins([*PROJECT["dependencies"], *(r for extra in PROJECT["optional-dependencies"].values() for r in extra)])
    assert declared == venv, "pyproject.toml (dependencies + extras) and requirements.txt must pin the same set"
    assert all(spec.startswith("==") for spec in venv.values())


def test_the_product_needs_no_test_or_lab_tools():
    product = pins(PROJECT["dependencies"])
    assert not {"pytest", "pytest-timeout", "hypothesis", "aiosmtpd", "matplotlib"} & set(product)
    assert {"apache-airflow", "pyspark", "pyspark-client", "confluent-kafka", "boto3", "rich-argparse"} <= set(product)
    extras = PROJECT["optional-dependencies"]
    assert {"pytest", "hypothesis"} <= set(pins(extras["test"])) and "matplotlib" in pins(extras["capacity"])


def setup_entry_points(tree) -> dict[str, list[str]]:
    """Run a copy of setup.py in ``tree`` with setuptools.setup replaced; its entry_points argument."""
    shutil.copy2(ROOT / "setup.py", tree / "setup.py")
    seen = {}
    mp = pytest.MonkeyPatch()
    mp.setattr(setuptools, "setup", lambda **kw: seen.update(kw))
    try:
        runpy.run_path(str(tree / "setup.py"), run_name="__main__")
    finally:
        mp.undo()
    return seen["entry_points"]


@pytest.mark.parametrize("present, commands", [
    (("aldebaran", "aldebaran_capacity", "aldebaran_lab"), ["capacity = aldebaran_capacity.cli", "lab = aldebaran_lab.cli"]),
    (("aldebaran", "aldebaran_capacity"), ["capacity = aldebaran_capacity.cli"]),  # the image (.dockerignore)
    (("aldebaran",), None),
])
def test_setup_py_declares_an_entry_point_per_package_present(tmp_path, present, commands):
    for package in present:
        (tmp_path / "include" / package).mkdir(parents=True)
        (tmp_path / "include" / package / "cli.py").write_text("")
    points = setup_entry_points(tmp_path)
    assert points["console_scripts"] == ["aldebaran = aldebaran.cli.main:main"]
    assert points.get("aldebaran.commands") == commands
    assert ("aldebaran.bench" in points) == ("aldebaran_lab" in present)


def test_this_venv_s_metadata_names_both_extensions():
    # A venv installed before the entry points (or before a package was added) needs `make setup` again.
    assert {ep.name for ep in entry_points(group=cli.COMMANDS_GROUP)} == {"capacity", "lab"}
    assert [m.__name__ for m in cli.extensions()] == ["aldebaran_capacity.cli", "aldebaran_lab.cli"]


def test_an_entry_point_whose_package_is_absent_is_skipped(monkeypatch, caplog):
    ghost = EntryPoint(name="ghost", value="aldebaran_ghost.cli", group=cli.COMMANDS_GROUP)
    real = list(entry_points(group=cli.COMMANDS_GROUP))
    others = {g: list(entry_points(group=g)) for g in ("aldebaran.bench",)}
    monkeypatch.setattr(cliparse, "entry_points",
                        lambda group: [*real, ghost] if group == cli.COMMANDS_GROUP else others[group])
    with caplog.at_level(logging.DEBUG, logger="aldebaran.runtime.cliparse"):
        parser = cli.build_parser()
    assert "aldebaran_ghost.cli" in caplog.text
    assert {"bench", "chaos", "services"} <= set(subcommands(parser))
    assert "deployed" in subcommands(subcommands(parser)["bench"])


def test_bench_modes_show_only_their_own_options(capsys):
    parser = cli.build_parser()
    bench = subcommands(subcommands(parser)["bench"])
    assert {"dispatch", "all", "e2e", "low-latency", "deployed", "steady"} <= set(bench)
    deployed = {o for a in bench["deployed"]._actions for o in a.option_strings}
    assert deployed == {"-h", "--help", "--rates", "--seconds", "--drain-seconds", "--start", "--report", "--runs",
                        "--rest-seconds", "--no-rest", "--capacity-rates", "--rung-seconds", "--no-capacity",
                        "--with-lane", "--webhook-batch", "--lane-only", "--exact-nice", "--rest-runs", "--rest-only",
                        "--fast-webhook"}
    assert "--quick" in {o for a in bench["all"]._actions for o in a.option_strings}


def test_a_handler_shared_by_modes_finds_every_attribute():
    parser = cli.build_parser()
    args = parser.parse_args(["deliveries", "stats"])
    assert (args.action, args.channel, args.alert_id, args.alert, args.state, args.reason) == ("stats", None, None, None, None, None)
    args = parser.parse_args(["chaos", "fuzz", "--short"])
    assert (args.campaign, args.short, args.events, args.kills, args.rate, args.signal) == ("fuzz", True, None, None, None, "term")
    assert parser.parse_args(["chaos", "fuzz", "--inputs", "300"]).inputs == 300  # per target besides trades
    args = parser.parse_args(["bench", "deployed", "--rates", "1000"])
    assert args.func.__name__ == "cmd_bench_deployed" and args.rates == "1000" and args.seconds == 20.0


def help_of(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv, shown, not_shown", [
    ([], "bench", "--drain-seconds"),
    (["bench"], "deployed", "--quick"),
    (["bench", "deployed"], "--drain-seconds", "--quick"),
    (["deliveries", "retry"], "--reason", "--outcome"),
    (["lanes", "resolve"], "--reason", "--json"),
    (["chaos", "outages"], "--kafka-down", "--payloads"),
    (["services", "up"], "--cluster", "--kafka-down"),
])
def test_help_at_every_level_shows_its_own_options(capsys, argv, shown, not_shown):
    out = help_of(argv, capsys)
    assert shown in out and not_shown not in out, out
