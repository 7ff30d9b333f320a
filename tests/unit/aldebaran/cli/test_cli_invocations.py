"""Every `aldebaran ...` command line the project documents or runs parses with the CLI as it is.

The lines come from the Makefile, scripts/ and .ci/, README.md and docs/ (fenced code blocks and inline
`code`), so a renamed subcommand or option cannot leave the docs behind; the command lines the code runs
as subprocesses are listed below with their callers. Spans that describe a command rather than run it
(`aldebaran services up|down|status`, `aldebaran bench [--quick]`, `aldebaran chaos …`) are recognised by
their usage syntax; a bare command name (`aldebaran bench`) only has to exist.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from aldebaran.cli import main as cli
from aldebaran.runtime import paths
from aldebaran.runtime.cliparse import subcommands

ROOT = paths.ROOT

# Usage syntax: alternatives, optional parts, elisions, placeholders of a subcommand or of a whole tail.
USAGE_SYNTAX = re.compile(r"[|\[\]…]|\.\.\.|\bSUBCOMMAND\b|\bCAMPAIGN\b|\bMODE\b|<name>|/--|(?<=\s)[A-Z](?=\s|$)")
# A placeholder for one value (`<alert id>`, `<id>`): one word.
PLACEHOLDER = re.compile(r"<[^<>]*>")

# What the code runs (subprocess argv after the executable), by caller.
CODE_INVOCATIONS = [
    ["dispatch", "--follow", "--name", "dispatcher-webhook", "--fast", "--channel", "webhook"],  # platform.dispatch_supervisor
    ["lanes", "run"],  # platform.lane_supervisor, tests/integration/test_lane_rotation.py
    ["lanes", "status"],  # tests/integration/dags/test_lane_supervisor.py
    ["auditor", "run", "--checkpoint", "/tmp/c", "--shards", "2"],  # aldebaran_lab.chaos.common (its args)
    ["auditor", "run", "--shards", "0"],  # aldebaran_lab.chaos.fuzz
    ["-v", "auditor", "status"],  # tests/integration/test_security.py
    ["dispatch", "--follow", "--name", "n", "--channel", "c"],  # chaos.common, bench.e2e, bench.dispatch
    ["dispatch", "--fast", "--follow", "--name", "fast"],  # tests/integration/test_fast_delivery.py
    ["demo"],  # aldebaran_lab.deployed
    ["demo", "--orders", "100", "--timeout", "300"], ["demo", "--stop"],  # tests/integration/test_demo.py
    ["explain", "0123abcd", "--json"],  # tests/integration/test_demo.py
    ["loadgen", "--rate", "5000", "--seconds", "60", "--seed", "1", "--watch", "--watch-linger", "30",
     "--expected", "/tmp/e.json"],  # aldebaran_lab.steady
    ["docs", "config", "--check", "--file", "/tmp/doc.md"],  # tests/unit/aldebaran_lab/test_docs_config.py
    ["services", "up"], ["services", "down"],  # scripts/test.sh
]


def fenced_lines(text: str):
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            yield line


def commands_in(line: str) -> list[str]:
    """The `aldebaran` command lines in one line of shell: what follows each `aldebaran` / `$(ALD)` / `$ALD`
    word, up to the end of its command (`&&`, `;`, `)`, a comment)."""
    found = []
    for part in re.split(r"&&|;|\|\||\)\s*$", line):
        m = re.search(r"(?:^|[\s/\"'(@])(?:aldebaran|\$\(ALD\)|\$ALD)\s+(.*)$", part)
        if m and not m.group(1).startswith(("import", "from", "cli", "|", "]")):
            found.append(m.group(1).split(" #", 1)[0].strip())
    return found


def documented() -> list[tuple[str, str]]:
    """(where, command line) for every documented or scripted invocation."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        for line in fenced_lines(text):
            if not line.lstrip().startswith(("from ", "import ", "TS[")):
                out += [(f"{where} (code block)", c) for c in commands_in(line.lstrip("$ "))]
        for span in re.findall(r"`((?:\.venv/bin/)?aldebaran [^`]+)`", text):
            out += [(f"{where} (inline)", c) for c in commands_in(span)]
    for path in [ROOT / "Makefile", ROOT / ".ci" / "run", *sorted((ROOT / "scripts").glob("*.sh"))]:
        for line in path.read_text().splitlines():
            if not line.lstrip().startswith("#") and "echo " not in line:
                line = re.sub(r"\$\((CHAOS|PYTEST)_ARGS\)", "", line).replace('"$ALD"', "$ALD")
                out += [(str(path.relative_to(ROOT)), c) for c in commands_in(line)]
    return out


@pytest.fixture(scope="module")
def parser():
    return cli.build_parser()


def check(parser, argv: list[str]) -> None:
    top = subcommands(parser)
    if len(argv) == 1 and argv[0] in top:
        return  # a command named in prose (`aldebaran bench`), not run
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code == 0 and "--help" in argv:
            return
        raise AssertionError(f"`aldebaran {shlex.join(argv)}` does not parse (exit {exc.code})") from None


def test_the_scan_finds_the_documented_commands():
    found = {c for _, c in documented()}
    assert len(found) > 60
    assert {"services up", "bench all --quick", "bench deployed --start --rest-runs 3 --report", "chaos all"} <= found
    assert "loadgen --rate 1000 --seconds 60 --watch" in found  # README's code block


def test_every_documented_command_line_parses(parser, capsys):
    bad = []
    for where, line in documented():
        if USAGE_SYNTAX.search(line):
            continue
        try:
            check(parser, shlex.split(PLACEHOLDER.sub("PLACEHOLDER", line)))
        except AssertionError as exc:
            bad.append(f"{where}: {exc}")
    capsys.readouterr()
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("argv", CODE_INVOCATIONS, ids=" ".join)
def test_the_code_s_command_lines_parse(parser, argv):
    check(parser, argv)


def test_a_wrong_option_for_a_mode_is_refused(parser, capsys):
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "deployed", "--quick"])
    assert "unrecognized arguments: --quick" in capsys.readouterr().err
