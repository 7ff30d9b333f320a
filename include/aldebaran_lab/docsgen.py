"""`aldebaran docs config`: the configuration reference in docs/operations.md, generated from the
settings models.

Every pydantic-settings class in the product package :mod:`aldebaran` (found by reading the source, so a new settings class
is picked up without registering it) becomes one markdown table: the env var of each field (its
alias, else ``env_prefix`` + field name, upper case), its type with its bounds, its default and its
description. The defaults come from the classes, never from the environment, so the output is the
same on every machine; a secret field shows ``(secret, required)`` or ``(secret, optional)``, never
a value.

    aldebaran docs config            rewrite the section between the markers in docs/operations.md
    aldebaran docs config --check    exit 1 if that section differs from what the code generates
"""

from __future__ import annotations

import ast
import importlib
import logging
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import annotated_types
from pydantic import SecretBytes, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

import aldebaran
from aldebaran import settings
from aldebaran.runtime import paths
from aldebaran.exceptions import AldebaranError

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(aldebaran.__file__).resolve().parent  # the product's settings, not this package's
OPERATIONS_MD = paths.ROOT / "docs" / "operations.md"
BEGIN = "<!-- config:begin -->"
END = "<!-- config:end -->"
# Field names that hold a secret even if someone types them as plain `str`.
SECRET_NAME = re.compile(r"secret|password|token|credential", re.IGNORECASE)


@dataclass(frozen=True)
class Row:
    env_var: str
    type: str
    default: str
    description: str
    scope: str = "tuning"


# --- finding the classes -----------------------------------------------------------------------
def _base_name(base: ast.expr) -> str:
    """`BaseSettings` of ``BaseSettings`` and of ``pydantic_settings.BaseSettings``."""
    if isinstance(base, ast.Name):
        return base.id
    return base.attr if isinstance(base, ast.Attribute) else ""


def settings_class_names(package_dir: Path = PACKAGE_DIR) -> list[tuple[str, str]]:
    """(module, class) of every settings class in the package (deriving from BaseSettings, or from another
    settings class of the package), in source order within each module; top-level modules first, then by
    path. A base that other settings classes extend (aldebaran.settings.SupervisionSettings) has no env
    prefix of its own: its fields are documented under each class that extends it. Reads the source;
    imports nothing."""
    classes = []
    for path in sorted(package_dir.rglob("*.py"), key=lambda p: (len(p.parts), p.as_posix())):
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = path.relative_to(package_dir.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        classes += [(module, node) for node in tree.body if isinstance(node, ast.ClassDef)]
    settings = {"BaseSettings"}
    grew = True
    while grew:  # a class extending a settings class is one, however deep
        before = len(settings)
        settings |= {node.name for _, node in classes if any(_base_name(b) in settings for b in node.bases)}
        grew = len(settings) > before
    bases = {_base_name(b) for _, node in classes if node.name in settings for b in node.bases}
    return [(module, node.name) for module, node in classes
            if node.name in settings and node.name not in bases]


def settings_classes(package_dir: Path = PACKAGE_DIR) -> list[type[BaseSettings]]:
    """The settings classes themselves (only the modules that define one are imported)."""
    return [getattr(importlib.import_module(module), name) for module, name in settings_class_names(package_dir)]


# --- one field → one row ----------------------------------------------------------------------
def env_var(cls: type[BaseSettings], name: str, field: FieldInfo) -> str:
    """The variable pydantic-settings reads: an alias as written (no prefix), else prefix + name."""
    alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
    if alias:
        return alias.upper()
    return f"{cls.model_config.get('env_prefix', '') or ''}{name}".upper()


def _type_name(annotation: typing.Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation) if a is not type(None))
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


_BOUNDS = ((annotated_types.Ge, "ge", "≥"), (annotated_types.Gt, "gt", ">"),
           (annotated_types.Le, "le", "≤"), (annotated_types.Lt, "lt", "<"))


def _bounds(field: FieldInfo) -> list[str]:
    """The field's constraints in words: ``≥ 1``, ``not empty``, ``matches `^…$```."""
    out = []
    for meta in field.metadata:
        out += [f"{sign} {getattr(meta, attr)}" for kind, attr, sign in _BOUNDS if isinstance(meta, kind)]
        if isinstance(meta, annotated_types.MinLen) and meta.min_length > 0:
            out.append("not empty" if meta.min_length == 1 else f"length ≥ {meta.min_length}")
        if isinstance(meta, annotated_types.MaxLen):
            out.append(f"length ≤ {meta.max_length}")
        pattern = getattr(meta, "pattern", None)
        if isinstance(pattern, str):
            out.append(f"matches `{pattern}`")
    return out


def is_secret(name: str, field: FieldInfo) -> bool:
    args = typing.get_args(field.annotation) or (field.annotation,)
    return any(a in (SecretStr, SecretBytes) for a in args) or bool(SECRET_NAME.search(name))


def _default(name: str, field: FieldInfo) -> str:
    required = field.is_required()
    if is_secret(name, field):
        return "(secret, required)" if required else "(secret, optional)"
    if required:
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _description(var: str, field: FieldInfo) -> str:
    """The field's description without the leading ``VAR:`` some descriptions repeat."""
    text = (field.description or "").strip()
    if text == var:
        return ""
    return text.removeprefix(f"{var}:").strip()


def rows(cls: type[BaseSettings]) -> list[Row]:
    out = []
    for name, field in cls.model_fields.items():
        var = env_var(cls, name, field)
        kind = _type_name(field.annotation)
        extras = _bounds(field)
        out.append(Row(var, kind + (f" ({', '.join(extras)})" if extras else ""), _default(name, field),
                       _description(var, field), settings.scope(var)))
    return out


# --- markdown -----------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_class(cls: type[BaseSettings], package_dir: Path = PACKAGE_DIR) -> str:
    module = importlib.import_module(cls.__module__)
    source = Path(module.__file__).resolve().relative_to(package_dir.parents[1]).as_posix()
    summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
    lines = [f"### `{cls.__name__}`", "", f"[`{source}`](../{source})" + (f": {summary}" if summary else ""), "",
             "| env var | scope | type | default | description |", "|---|---|---|---|---|"]
    lines += [f"| `{r.env_var}` | {r.scope} | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.description)} |"
              for r in rows(cls)]
    return "\n".join(lines)



def render(classes: list[type[BaseSettings]] | None = None) -> str:
    """The whole generated section (without the markers)."""
    classes = settings_classes() if classes is None else classes
    head = ("_Generated by `aldebaran docs config` from the pydantic-settings classes; do not edit by hand "
            "(`aldebaran docs config --check` fails when this is stale). Defaults are the code's, not this "
            "machine's environment._\n\n"
            "Scope: **deployment** — a deployment must know it (where the services are, the topics, the channels; "
            "the first block of `.env.example`); **tuning** — the defaults serve, change one for a measured reason "
            "(`.env.example` lists the often tuned ones); **test-only** — tests, demos and bounded runs set it; "
            "the table above has the variables read outside these classes. The tiers are named in "
            "`include/aldebaran/settings.py`.")
    return "\n\n".join([head] + [render_class(c) for c in classes])


# --- the section in docs/operations.md ----------------------------------------------------------
def splice(document: str, section: str) -> str:
    """`document` with the text between the markers replaced by `section`."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise AldebaranError(f"the document has no {BEGIN} … {END} section to generate into")
    return document[: start + len(BEGIN)] + "\n" + section + "\n" + document[end:]


def is_current(path: Path = OPERATIONS_MD, section: str | None = None) -> bool:
    text = path.read_text()
    return splice(text, render() if section is None else section) == text


def write(path: Path = OPERATIONS_MD, section: str | None = None) -> bool:
    """Rewrite the section; True if the file changed."""
    text = path.read_text()
    new = splice(text, render() if section is None else section)
    if new == text:
        return False
    path.write_text(new)
    return True


def main(args) -> int:
    path = Path(args.file) if args.file else OPERATIONS_MD
    if args.check:
        if is_current(path):
            log.info("%s: configuration reference is current", path)
            return 0
        log.error("%s: configuration reference is stale; run `aldebaran docs config`", path)
        return 1
    changed = write(path)
    log.info("%s: configuration reference %s", path, "rewritten" if changed else "already current")
    return 0
