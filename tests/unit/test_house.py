"""The shape of include/ (docs/design.md, "Packages"): imports go downward only — lab → capacity →
product — and no module is part of an import cycle.

Read from the source with `ast`, so a lazy import inside a function counts like a top-level one (it
is a dependency all the same), and so does one under ``if TYPE_CHECKING:`` (the type names a module the
reader must understand first: a cycle of annotations is a cycle of understanding).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "include"
PRODUCT = "aldebaran"
# Each package under include/ and what it may import besides itself.
MAY_IMPORT = {
    "aldebaran": (),
    "aldebaran_capacity": ("aldebaran",),
    "aldebaran_lab": ("aldebaran", "aldebaran_capacity"),
}
# The deployables: the image holds them with the product and the capacity package, never the lab.
DEPLOYED = {"dags": ("aldebaran", "aldebaran_capacity"), "plugins": ("aldebaran", "aldebaran_capacity"),
            "spark_apps": ("aldebaran",)}


# --- reading the imports ------------------------------------------------------------------------
def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module under include/ that belongs to one of the packages."""
    return {module_name(p, INCLUDE): p for pkg in MAY_IMPORT for p in sorted((INCLUDE / pkg).rglob("*.py"))}


def imports(path: Path, name: str) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the module (lazy and TYPE_CHECKING ones too), relative
    ones resolved; ``from package import name`` is the submodule when ``name`` is one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([node.module] if node.module else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            out.append((sub if sub in modules() else base, node.lineno))
    return out


def _own(target: str) -> str | None:
    """The module of ours that an import runs: the target, else its closest package of ours."""
    while target and target not in modules():
        target = target.rpartition(".")[0]
    return target or None


@cache
def graph() -> dict[str, set[str]]:
    out = {}
    for name, path in modules().items():
        out[name] = {own for target, _ in imports(path, name) if (own := _own(target)) and own != name}
    return out


def top(module: str) -> str:
    return module.split(".", 1)[0]


# --- direction ------------------------------------------------------------------------------------
def upward(name: str, path: Path, allowed: tuple[str, ...]) -> list[str]:
    own = top(name)
    return [f"{path.relative_to(ROOT)}:{line} imports {target}" for target, line in imports(path, name)
            if top(target) in MAY_IMPORT and top(target) != own and top(target) not in allowed]


def test_the_scan_reads_the_packages():
    assert {top(m) for m in modules()} == set(MAY_IMPORT)
    assert "aldebaran.cli" in modules() and "aldebaran_capacity.loadgen" in modules()
    assert {"aldebaran.reference", "aldebaran_capacity.loadgen"} <= graph()["aldebaran_lab.chaos.under_load"]


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_go_downward(package):
    wrong = [line for name, path in modules().items() if top(name) == package
             for line in upward(name, path, MAY_IMPORT[package])]
    allowed = ", ".join(MAY_IMPORT[package]) or "nothing else"
    assert not wrong, f"{package} may import {allowed}: " + "; ".join(wrong)


@pytest.mark.parametrize("folder", sorted(DEPLOYED))
def test_deployed_code_never_imports_the_lab(folder):
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for target, line in imports(path, module_name(path, ROOT)):
            if top(target) in MAY_IMPORT and top(target) not in DEPLOYED[folder]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, f"{folder}/ may import {', '.join(DEPLOYED[folder])}: " + "; ".join(wrong)


# --- cycles ---------------------------------------------------------------------------------------
def strongly_connected(g: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in g.get(v, ()):
                found.append(component)

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def a_cycle(g: dict[str, set[str]], component: set[str]) -> list[str]:
    """One cycle through the component, as a path that returns to its start."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in g[path[-1]] if w in component)
        if start in nxt and len(path) > 1 or nxt == [start]:
            return path + [start]
        step = next((w for w in nxt if w not in seen), None)
        if step is None:  # every successor seen: close the loop at the first one on the path
            back = next(w for w in nxt if w in seen)
            return path[path.index(back):] + [back]
        path.append(step)
        seen.add(step)


def test_no_import_cycles():
    g = graph()
    cycles = strongly_connected(g)
    assert not cycles, "import cycles: " + "; ".join(" → ".join(a_cycle(g, c)) for c in cycles)


def test_the_cycle_check_sees_a_cycle_and_names_it():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert sorted(map(sorted, strongly_connected(g))) == [["a", "b", "c"], ["e"]]
    assert a_cycle(g, {"a", "b", "c"}) == ["a", "b", "c", "a"]
    assert a_cycle(g, {"e"}) == ["e", "e"]


# --- the product alone -------------------------------------------------------------------------------
def test_the_product_runs_without_the_other_packages(tmp_path):
    """What the image holds minus the capacity package: every product module imports and `aldebaran`
    offers its core commands."""
    import shutil

    shutil.copytree(INCLUDE / PRODUCT, tmp_path / PRODUCT, ignore=shutil.ignore_patterns("__pycache__"))
    # From the files, not pkgutil: audit/ is a namespace package, which walk_packages does not enter.
    product = sorted(m for m in modules() if top(m) == PRODUCT and not m.endswith("__main__"))
    assert len(product) > 50
    script = textwrap.dedent(f"""
        import importlib, importlib.util, pathlib, sys
        sys.path[:] = [p for p in sys.path if not (pathlib.Path(p or ".") / "aldebaran").is_dir()]
        sys.path.insert(0, {str(tmp_path)!r})
        assert importlib.util.find_spec("aldebaran_capacity") is None and importlib.util.find_spec("aldebaran_lab") is None
        import aldebaran
        assert aldebaran.__file__.startswith({str(tmp_path)!r}), aldebaran.__file__
        for name in {product!r}:
            importlib.import_module(name)
        from aldebaran import cli
        sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
        print(",".join(sub.choices))
        print(sorted(n for n in sys.modules if n.startswith(("aldebaran_capacity", "aldebaran_lab"))))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    commands, loaded = proc.stdout.split("\n")[:2]
    assert commands == "auditor,dispatch,deliveries,explain,lanes"
    assert loaded == "[]"


# --- the tree as documented and as shipped -------------------------------------------------------------
def test_every_package_has_its_rules_and_its_row_in_the_readme():
    on_disk = {p.name for p in INCLUDE.iterdir() if (p / "__init__.py").exists()}
    assert on_disk == set(MAY_IMPORT), "a package under include/ needs its place in MAY_IMPORT"
    readme = (ROOT / "README.md").read_text()
    assert not [p for p in sorted(on_disk) if f"`include/{p}/`" not in readme], "README.md's layout table"


def test_the_image_leaves_the_lab_out_and_keeps_the_rest():
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert "include/aldebaran_lab" in ignored
    assert not ignored & {"include", "include/aldebaran", "include/aldebaran_capacity", "dags", "plugins", "spark_apps",
                          "setup", "pyproject.toml", "requirements.txt", "constraints.txt", "packages.txt"}


# --- one Checkpoint ----------------------------------------------------------------------------------
# A string that builds a path of the checkpoint's layout: its books, Spark's state, the lease, the markers.
CHECKPOINT_LAYOUT = re.compile(r"/(books|spark)(/|$)|^(books|spark)/|FINISHED\.json|plan\.json|leases/auditor")
CHECKPOINT_MODULE = INCLUDE / "aldebaran" / "checkpoint.py"


def layout_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string in the module's code that spells a piece of the checkpoint's layout
    (docstrings aside: they may describe it). An f-string counts by its literal parts."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and CHECKPOINT_LAYOUT.search(node.value)]


def test_only_the_checkpoint_module_builds_checkpoint_paths():
    """aldebaran.checkpoint.Checkpoint owns the layout: nothing else spells `/books`, `/spark`, the lease's
    prefix or a marker's name."""
    files = [p for folder in ("include", "dags", "plugins", "spark_apps") for p in sorted((ROOT / folder).rglob("*.py"))
             if p != CHECKPOINT_MODULE]
    found = [f"{p.relative_to(ROOT)}:{line} {text!r}" for p in files for line, text in layout_strings(p)]
    assert not found, "build these with aldebaran.checkpoint.Checkpoint: " + "; ".join(found)
    assert layout_strings(CHECKPOINT_MODULE), "the scan no longer sees the layout where it is built"


def test_the_checkpoint_scan_sees_a_string_built_path(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""Books live in <checkpoint>/books."""\n'
                   'def books(cp):\n    return cp.rstrip("/") + "/books"\n'
                   'def commits(cp):\n    return f"{cp}/spark/commits"\n'
                   'MARKER = "FINISHED.json"\n')
    assert sorted(line for line, _ in layout_strings(bad)) == [3, 5, 6]


# --- one typed model: one Alert, one Event ---------------------------------------------------------------
MODEL = "include/aldebaran/model.py"
DRIFTED = {"EventRow", "Trade"}  # the event's former second and third names


def classes_named(names: set[str], folder: Path = INCLUDE) -> dict[str, list[str]]:
    """Where each class of these names is defined under `folder` (path relative to the repository)."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name in names:
                found.setdefault(node.name, []).append(str(path.relative_to(folder.parent)))
    return found


def test_one_alert_class_and_one_event_type():
    """aldebaran.model holds the one Alert and the one Event: the audit's rule result is a Finding, and
    neither the parse nor explain has an event type of its own."""
    found = classes_named({"Alert", "Event"} | DRIFTED)
    assert found.get("Alert") == [MODEL], f"one class Alert, in {MODEL}: {found.get('Alert')}"
    assert found.get("Event") == [MODEL], f"one class Event, in {MODEL}: {found.get('Event')}"
    assert not DRIFTED & set(found), f"use aldebaran.model.Event: {[(n, found[n]) for n in DRIFTED & set(found)]}"


def test_the_class_scan_sees_a_second_alert(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "a.py").write_text("class Alert:\n    pass\n\ndef f():\n    class Trade:\n        pass\n")
    assert classes_named({"Alert", "Trade"}, tmp_path / "include") == {"Alert": ["include/a.py"],
                                                                       "Trade": ["include/a.py"]}
