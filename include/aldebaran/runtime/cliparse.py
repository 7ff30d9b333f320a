"""Parser building for `aldebaran`: rich help, and commands with modes as nested subcommands.

A command whose modes take different options (`aldebaran bench MODE`, `deliveries ACTION`, `lanes ACTION`,
`chaos CAMPAIGN`) lists each option once in a table of :class:`Opt`, naming the modes that take it;
:func:`add_modes` gives every mode a subparser with only its own options, so `aldebaran bench deployed
--help` shows the deployed bench's options and no other. A handler shared by several modes (the
deliveries tool, `chaos all`) still finds every attribute of the table on its namespace: each mode's
parser also carries the defaults of the options it does not take.

Help is rendered by rich-argparse (a dependency of Airflow, pinned in pyproject.toml): colours on a
terminal, plain text in a pipe or under NO_COLOR.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from rich_argparse import RawDescriptionRichHelpFormatter

log = logging.getLogger(__name__)


class HelpFormatter(RawDescriptionRichHelpFormatter):
    """Rich help that prints help texts as written: they hold brackets (``[env ALDEBARAN_...]``), not markup."""

    help_markup = False
    text_markup = False


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with rich help. `add_subparsers` makes its subparsers of the parent's class, so
    every level of `aldebaran` gets the same formatter."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs) -> None:
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


@dataclass(frozen=True)
class Opt:
    """One option of a command with modes: its flags, the modes that take it (empty: every mode), its
    help (one text, or a text per mode) and the rest of `add_argument`'s keywords."""

    flags: tuple[str, ...]
    modes: tuple[str, ...] = ()
    help: str | Mapping[str, str] = ""
    kwargs: Mapping = field(default_factory=dict)

    def takes(self, mode: str) -> bool:
        return not self.modes or mode in self.modes

    def help_for(self, mode: str) -> str | None:
        if isinstance(self.help, Mapping):
            return self.help.get(mode) or self.help.get("*")
        return self.help or None


def opt(*flags: str, modes: str | Iterable[str] = (), help: str | Mapping[str, str] = "", **kwargs) -> Opt:
    """``opt("--rates", modes="e2e,low-latency", help=..., default=None)``: modes comma-separated or a list."""
    names = tuple(m for m in modes.split(",") if m) if isinstance(modes, str) else tuple(modes)
    return Opt(flags=flags, modes=names, help=help, kwargs=kwargs)


def add_modes(parser: argparse.ArgumentParser, dest: str, modes: Mapping[str, str], options: Iterable[Opt],
              title: str = "modes", metavar: str | None = None) -> argparse._SubParsersAction:
    """A required subcommand ``dest`` on ``parser``: one subparser per mode (name → one-line help) with the
    options of ``options`` that take it. Returns the subparsers action (``add_parser`` adds more modes);
    each mode's parser is in its ``choices``."""
    options = list(options)
    unknown = sorted({m for o in options for m in o.modes} - set(modes))
    if unknown:
        raise ValueError(f"options name modes that do not exist: {', '.join(unknown)}")
    sub = parser.add_subparsers(dest=dest, required=True, title=title, metavar=metavar or dest.upper())
    made = {}
    for name, text in modes.items():
        p = sub.add_parser(name, help=text, description=text)
        for o in options:
            if o.takes(name):
                p.add_argument(*o.flags, help=o.help_for(name), **o.kwargs)
        made[name] = p
    # Every mode's namespace carries the whole table (a shared handler reads any attribute).
    defaults: dict = {}
    for p in made.values():
        for action in p._actions:
            if action.dest not in ("help", argparse.SUPPRESS):
                defaults.setdefault(action.dest, action.default)
    for p in made.values():
        own = {a.dest for a in p._actions}
        p.set_defaults(**{d: v for d, v in defaults.items() if d not in own})
    return sub


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``parser`` (name → parser), or {} when it has none."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def load_entry_points(group: str) -> list:
    """The objects the entry points of ``group`` name, by entry-point name (the first of a name wins).

    An entry point whose package is not importable here is skipped with a debug message: the installed
    metadata is older than the tree (a package removed since `pip install -e .`), or the product runs
    alone from a copy (tests/unit/test_house.py)."""
    found = {}
    for ep in entry_points(group=group):
        found.setdefault(ep.name, ep)
    loaded = []
    for name in sorted(found):
        ep = found[name]
        if importlib.util.find_spec(ep.module.split(".", 1)[0]) is None:
            log.debug("entry point %s = %s (%s): its package is not importable here (installed metadata older "
                      "than the tree? `pip install -e .` refreshes it)", name, ep.value, group)
            continue
        loaded.append(ep.load())
    return loaded
