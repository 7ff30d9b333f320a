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
    assert "aldebaran.cli.main" in modules() and "aldebaran_capacity.loadgen" in modules()
    assert {"aldebaran.audit.reference", "aldebaran_capacity.loadgen"} <= graph()["aldebaran_lab.chaos.under_load"]


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


def test_the_kafka_package_imports_nothing_from_delivery():
    """The Kafka clients sit under delivery: a dispatcher passes its group's values to aldebaran.kafka."""
    wrong = [f"{name} imports {dep}" for name, deps in sorted(graph().items())
             if name.startswith("aldebaran.kafka.") for dep in sorted(deps) if dep.startswith("aldebaran.delivery")]
    assert "aldebaran.kafka.failover" in graph() and not wrong, "; ".join(wrong)


def test_the_cycle_check_sees_a_cycle_and_names_it():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert sorted(map(sorted, strongly_connected(g))) == [["a", "b", "c"], ["e"]]
    assert a_cycle(g, {"a", "b", "c"}) == ["a", "b", "c", "a"]
    assert a_cycle(g, {"e"}) == ["e", "e"]


# --- the product's root holds only what every part shares ---------------------------------------------
ROOT_MODULES = {"__init__.py", "model.py", "settings.py", "exceptions.py"}


def loose_modules(base: Path) -> list[str]:
    """The modules directly under `base` beyond the shared few: each belongs in a package."""
    return sorted(p.name for p in base.glob("*.py") if p.name not in ROOT_MODULES)


def test_the_product_root_holds_only_the_shared_modules():
    """At most the typed model, the settings, the exceptions and __init__.py: storage/, runtime/, cli/, audit/ ... hold
    the rest, each module in the package of the part it serves."""
    assert not loose_modules(INCLUDE / PRODUCT), (
        f"move into a package of include/{PRODUCT}/ (docs/design.md 'room by room'): {loose_modules(INCLUDE / PRODUCT)}")


def test_the_root_scan_sees_a_loose_module(tmp_path):
    for name in ("__init__.py", "model.py", "settings.py", "exceptions.py", "paths.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "spark.py").write_text("")
    assert loose_modules(tmp_path) == ["paths.py"]


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
        from aldebaran.cli import main as cli
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
CHECKPOINT_MODULE = INCLUDE / "aldebaran" / "runtime" / "checkpoint.py"


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
    """aldebaran.runtime.checkpoint.Checkpoint owns the layout: nothing else spells `/books`, `/spark`, the lease's
    prefix or a marker's name."""
    files = [p for folder in ("include", "dags", "plugins", "spark_apps") for p in sorted((ROOT / folder).rglob("*.py"))
             if p != CHECKPOINT_MODULE]
    found = [f"{p.relative_to(ROOT)}:{line} {text!r}" for p in files for line, text in layout_strings(p)]
    assert not found, "build these with aldebaran.runtime.checkpoint.Checkpoint: " + "; ".join(found)
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


# --- one storage layer, opened one way -----------------------------------------------------------------
HOUSE_TEST = Path(__file__).resolve()
OLD_STORAGE_NAME = re.compile(r"\bobjectstore\b|\bObjectStore\b")  # the layer's former module and alias
TEXT_SUFFIXES = {".py", ".md", ".txt", ".json", ".yml", ".yaml", ".toml", ".cfg", ".ini", ".sh", ".conf"}
STORAGE_MODULE = INCLUDE / "aldebaran" / "storage" / "store.py"
BACKENDS = {"S3Store", "LocalStore"}


def old_storage_names(folders: list[Path]) -> list[str]:
    """path:line of every `objectstore` / `ObjectStore` in the text files under `folders`."""
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.suffix not in TEXT_SUFFIXES or "__pycache__" in path.parts or path.resolve() == HOUSE_TEST:
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if OLD_STORAGE_NAME.search(line):
                    found.append(f"{path.relative_to(folder.parent)}:{n}")
    return found


def test_the_storage_layer_has_one_name():
    folders = [ROOT / f for f in ("include", "dags", "plugins", "spark_apps", "tests") if (ROOT / f).is_dir()]
    found = old_storage_names(folders)
    assert not found, "the storage layer is aldebaran.storage.store (a Store, opened by open_store): " + ", ".join(found)


def test_the_name_scan_sees_the_old_name(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from aldebaran import objectstore\nstore: ObjectStore\nObjectStoreError\n")
    (tmp_path / "pkg" / "b.md").write_text("see `aldebaran.objectstore`\n")
    assert old_storage_names([tmp_path / "pkg"]) == ["pkg/a.py:1", "pkg/a.py:2", "pkg/b.md:1"]


def backend_constructions(path: Path) -> list[int]:
    """Lines where the module calls S3Store(...) or LocalStore(...) itself."""
    return sorted(node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
                  if isinstance(node, ast.Call)
                  and (getattr(node.func, "id", None) in BACKENDS or getattr(node.func, "attr", None) in BACKENDS))


def test_the_product_opens_a_store_one_way():
    """Product code opens a store with storage.store.open_store / open_prefix: only storage/store.py picks the backend."""
    found = [f"{p.relative_to(ROOT)}:{line}" for p in sorted((INCLUDE / PRODUCT).rglob("*.py")) if p != STORAGE_MODULE
             for line in backend_constructions(p)]
    assert not found, "open the store with aldebaran.storage.store.open_store(location): " + ", ".join(found)
    assert backend_constructions(STORAGE_MODULE), "the scan no longer sees where the backends are built"


def test_the_construction_scan_sees_a_backend_built_by_hand(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from aldebaran.storage import store as storage\nfrom aldebaran.storage.store import S3Store\n"
                   "a = S3Store()\nb = storage.LocalStore('/tmp/x')\nc = storage.open_store()\n")
    assert backend_constructions(bad) == [3, 4]


# --- comments say why ----------------------------------------------------------------------------------
# An issue number, or a calendar date in prose ("2026-11-24", "on 11-25"): such facts belong in docs/.
# A timestamp example (2026-11-22T09:00:00Z) or a dated API path (/2010-04-01/...) is no such fact.
DATED_OR_NUMBERED = re.compile(
    r"\bissues?\s+#?\d+|\(#\d+\)"
    r"|(?<![/\w-])20\d\d-[01]\d(?:-[0-3]\d)?(?![\w/:-])"
    r"|\b(?:on|since|until|by|from|before|after)\s+[01]\d-[0-3]\d\b(?![\w/:-])", re.IGNORECASE)


def comment_texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring line of a module."""
    import io
    import tokenize

    source = path.read_text()
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            first = node.body[0].lineno
            out += [(first + i, line) for i, line in enumerate(node.body[0].value.value.splitlines())]
    return out


def dated_or_numbered(path: Path) -> list[str]:
    return [f"{line}: {text.strip()[:100]}" for line, text in sorted(comment_texts(path))
            if DATED_OR_NUMBERED.search(text)]


def test_product_comments_carry_no_issue_numbers_or_dates():
    """Comments and docstrings of the product say why; a dated figure or an issue number goes to docs/
    (design.md, benchmarks.md, reliability.md), where it can be kept current."""
    found = [f"{p.relative_to(ROOT)}:{hit}" for p in sorted((INCLUDE / PRODUCT).rglob("*.py"))
             for hit in dated_or_numbered(p)]
    assert not found, "move these facts to docs/ and say why here:\n" + "\n".join(found)


def test_the_comment_scan_sees_issue_numbers_and_dates(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""The lane (issue 19).\n\nA time like 2026-11-22T09:00:00Z or /2010-04-01/x is fine."""\n'
                   "x = 1  # measured 2026-11-24 on the dev box\n"
                   "def f():\n    \"\"\"Fixed in (#12),\n    and slower on 11-25.\"\"\"\n"
                   "s = 'issue 3 in a string is code, not a comment'  # 10-20 % of a core\n")
    assert [hit.split(":")[0] for hit in dated_or_numbered(bad)] == ["1", "4", "6", "7"]


# --- the docs name the product's rooms ------------------------------------------------------------------
DESIGN = ROOT / "docs" / "design.md"


def product_rooms(base: Path) -> set[str]:
    """`name.py` and `name/` for every module and package directly under `base`."""
    return {f"{p.name}/" if p.is_dir() else p.name for p in base.iterdir()
            if not p.name.startswith("_") and (p.suffix == ".py" or (p.is_dir() and any(p.rglob("*.py"))))}


def rooms_in_table(markdown: str) -> set[str]:
    """Every `name.py` / `name/` in the first column of design.md's "room by room" table."""
    section = markdown.split("**The product, room by room.**", 1)[1].split("\n\n", 2)[1]
    return {name for row in section.splitlines() if row.startswith("| `")
            for name in re.findall(r"`([\w.]+(?:\.py|/))`", row.split("|")[1])}


def test_design_names_every_room_of_the_product():
    on_disk, in_docs = product_rooms(INCLUDE / PRODUCT), rooms_in_table(DESIGN.read_text())
    assert not on_disk - in_docs, f"docs/design.md 'room by room' misses {sorted(on_disk - in_docs)}"
    assert not in_docs - on_disk, f"docs/design.md 'room by room' names what is gone: {sorted(in_docs - on_disk)}"


def test_the_room_scan_sees_a_new_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    (tmp_path / "_private.py").write_text("")
    assert product_rooms(tmp_path) == {"pkg/", "b.py"}
    doc = "**The product, room by room.** x\n\n| room | what |\n|---|---|\n| `b.py`, `c.py` | two |\n\nafter `d.py`"
    assert rooms_in_table(doc) == {"b.py", "c.py"}


# --- the docs describe the design as it is -------------------------------------------------------------
# History lives in git and CHANGELOG.md; a doc quotes today's figures with their command and date.
# reliability.md holds each campaign's method and its latest run, not every run: the older ones are in git.
DOC_LINE_LIMITS = {"docs/design.md": 900, "docs/reliability.md": 800, "README.md": 200, "CHANGELOG.md": 80}
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+|\(#\d+\)", re.IGNORECASE)
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def current_docs(root: Path = ROOT) -> list[Path]:
    """Every doc the scans read: the README, the changelog and every page under docs/, none exempt."""
    return [root / "README.md", root / "CHANGELOG.md"] + sorted((root / "docs").glob("*.md"))


def over_limit(path: Path, limit: int) -> str | None:
    """Why the doc is too long, or None."""
    lines = len(path.read_text().splitlines())
    return f"{path.name} has {lines} lines, at most {limit}: history goes to git" if lines > limit else None


def issue_numbers(paths: list[Path]) -> list[str]:
    return [f"{p.relative_to(p.parents[1] if p.parent.name == 'docs' else p.parent)}:{n}"
            for p in paths for n, line in enumerate(p.read_text().splitlines(), 1) if ISSUE_NUMBER.search(line)]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation but `-` and `_` dropped, spaces to `-`,
    a repeated heading suffixed -1, -2, ..."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower().replace("`", "")).replace(" ", "-")
        found.add(slug if slug not in counts else f"{slug}-{counts[slug]}")
        counts[slug] = counts.get(slug, 0) + 1
    return found


def broken_links(path: Path) -> list[str]:
    """Relative links of a markdown file whose file, or whose #anchor in a markdown file, does not exist."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    broken = []
    for target in MD_LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file) if file else path
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in github_anchors(resolved.read_text()):
            broken.append(target)
    return broken


@pytest.mark.parametrize("doc", sorted(DOC_LINE_LIMITS))
def test_docs_stay_within_their_size(doc):
    assert not over_limit(ROOT / doc, DOC_LINE_LIMITS[doc]), over_limit(ROOT / doc, DOC_LINE_LIMITS[doc])


def test_docs_carry_no_issue_numbers():
    found = issue_numbers(current_docs())
    assert not found, "say what the design is, not which issue changed it: " + ", ".join(found)


@pytest.mark.parametrize("doc", ["README.md", "docs/design.md", "docs/reliability.md", "CHANGELOG.md"])
def test_every_relative_link_resolves(doc):
    assert not broken_links(ROOT / doc), f"{doc} links to what does not exist: {broken_links(ROOT / doc)}"


def test_the_doc_scans_see_an_issue_number_and_a_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "a.md"
    doc.write_text("# A `b` title\n\n## Same\n\n## Same\n\nfixed in issue 12, see Issue #3 and (#4); issues are fine\n"
                   "[ok](#a-b-title) [ok](#same-1) [gone](#same-2) [ok](a.md#same) [gone](missing.md) [web](https://x/y)\n"
                   "```\n[in code](nowhere.md)\n```\n")
    assert issue_numbers([doc]) == ["docs/a.md:7"]
    assert github_anchors(doc.read_text()) == {"a-b-title", "same", "same-1"}
    assert broken_links(doc) == ["#same-2", "missing.md"]


def test_the_doc_scans_read_every_doc_and_see_one_too_long(tmp_path):
    (tmp_path / "docs").mkdir()
    for name in ("README.md", "CHANGELOG.md", "docs/reliability.md", "docs/benchmarks.md"):
        (tmp_path / name).write_text("one\ntwo\nthree\n")
    (tmp_path / "docs" / "notes.txt").write_text("issue 4\n")
    (tmp_path / "docs" / "benchmarks.md").write_text("measured for issue 36\n")
    assert current_docs(tmp_path) == [tmp_path / "README.md", tmp_path / "CHANGELOG.md",
                                      tmp_path / "docs" / "benchmarks.md", tmp_path / "docs" / "reliability.md"]
    assert issue_numbers(current_docs(tmp_path)) == ["docs/benchmarks.md:1"]
    assert over_limit(tmp_path / "docs" / "reliability.md", 3) is None
    assert over_limit(tmp_path / "docs" / "reliability.md", 2) == (
        "reliability.md has 3 lines, at most 2: history goes to git")


# --- tests mirror the tree ----------------------------------------------------------------------
# tests/unit/<package>/<subpackage>/test_*.py covers include/<package>/<subpackage>/: a reader finds a module's
# tests by its path. deploy/ (compose files), plugins/ (the Airflow plugin) and support/ (shared helpers) sit
# beside the packages; only this file stays at the root, as it checks the whole tree.
UNIT = ROOT / "tests" / "unit"
LAB_AND_CAPACITY = ("aldebaran_lab", "aldebaran_capacity")


def misplaced_tests(unit: Path, include: Path) -> list[str]:
    """Test files at the root of `unit` (but this one), or in a package folder with no twin under `include`."""
    out = [p.name for p in sorted(unit.glob("test_*.py")) if p.name != HOUSE_TEST.name]
    for pkg in MAY_IMPORT:
        for path in sorted((unit / pkg).rglob("test_*.py")):
            if not (include / path.parent.relative_to(unit)).is_dir():
                out.append(str(path.relative_to(unit)))
    return out


def folders_without_init(unit: Path) -> list[str]:
    """Folders holding tests without an __init__.py: tests/unit/__init__.py says why each must be a package."""
    return sorted({str(p.parent.relative_to(unit)) for p in unit.rglob("test_*.py")
                   if "__pycache__" not in p.parts and not (p.parent / "__init__.py").is_file()})


def product_tests_importing(unit: Path, packages: tuple[str, ...]) -> list[str]:
    """'file:line' for every import of `packages` (lazy ones too) in the product's tests."""
    out = []
    for path in sorted((unit / PRODUCT).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            if any(name.split(".")[0] in packages for name in names):
                out.append(f"{path.relative_to(unit)}:{node.lineno}")
    return out


def test_unit_tests_mirror_the_packages():
    assert not misplaced_tests(UNIT, INCLUDE), (
        f"move these beside what they cover (tests/unit/<package>/<folder under include/<package>>/): "
        f"{misplaced_tests(UNIT, INCLUDE)}")
    assert not folders_without_init(UNIT), f"add an __init__.py to {folders_without_init(UNIT)}"


def test_the_product_tests_never_import_the_lab_or_capacity():
    assert not product_tests_importing(UNIT, LAB_AND_CAPACITY), (
        "a product test imports the lab or capacity: use a product API or a test-local helper, or move the test "
        f"under tests/unit/aldebaran_lab or aldebaran_capacity: {product_tests_importing(UNIT, LAB_AND_CAPACITY)}")


def test_the_mirror_scans_see_a_stray_test_a_folder_with_no_twin_and_a_lab_import(tmp_path):
    unit, include = tmp_path / "unit", tmp_path / "include"
    (include / PRODUCT / "delivery").mkdir(parents=True)
    (unit / PRODUCT / "delivery").mkdir(parents=True)
    (unit / PRODUCT / "nowhere").mkdir()
    (unit / "test_stray.py").write_text("")
    (unit / HOUSE_TEST.name).write_text("")
    (unit / PRODUCT / "__init__.py").write_text("")
    (unit / PRODUCT / "delivery" / "__init__.py").write_text("")
    (unit / PRODUCT / "delivery" / "test_ok.py").write_text(
        "import aldebaran.delivery\n\n\ndef test_x():\n    from aldebaran_lab.chaos import common\n")
    (unit / PRODUCT / "nowhere" / "test_lost.py").write_text("import aldebaran_capacity\nfrom aldebaran import x\n")
    assert misplaced_tests(unit, include) == ["test_stray.py", "aldebaran/nowhere/test_lost.py"]
    assert folders_without_init(unit) == [".", "aldebaran/nowhere"]
    assert product_tests_importing(unit, LAB_AND_CAPACITY) == ["aldebaran/delivery/test_ok.py:5",
                                                               "aldebaran/nowhere/test_lost.py:1"]


MODULE_LINE_LIMIT = 400  # a module over it is usually two rooms (HOUSE.md)
# Over the soft limit a module is close to two rooms: a few may stay (one long loop, one state machine), a
# crowd of them means the splitting stopped.
MODULE_SOFT_LIMIT = 350
MODULES_OVER_SOFT_LIMIT_MAX = 4


def long_modules(root: Path, limit: int = MODULE_LINE_LIMIT) -> list[str]:
    return [f"{p.relative_to(root)}: {n} lines" for p in sorted(root.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > limit]


def test_no_product_module_is_over_the_limit():
    assert not long_modules(INCLUDE / PRODUCT), long_modules(INCLUDE / PRODUCT)


def test_the_length_scan_sees_a_long_module(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n" * (MODULE_LINE_LIMIT + 1))
    (tmp_path / "b.py").write_text("x = 1\n" * MODULE_LINE_LIMIT)
    assert long_modules(tmp_path) == [f"a.py: {MODULE_LINE_LIMIT + 1} lines"]


def crowded(root: Path, limit: int = MODULE_SOFT_LIMIT, most: int = MODULES_OVER_SOFT_LIMIT_MAX) -> str | None:
    """Why too many modules under `root` are over `limit` lines, or None."""
    over = long_modules(root, limit)
    return (f"{len(over)} modules over {limit} lines, at most {most}: split one along its seam: {over}"
            if len(over) > most else None)


def test_few_product_modules_are_over_the_soft_limit():
    assert not crowded(INCLUDE / PRODUCT), crowded(INCLUDE / PRODUCT)


def test_the_crowd_scan_counts_the_modules_over_the_soft_limit(tmp_path):
    (tmp_path / "pkg").mkdir()
    for name in ("a.py", "b.py", "pkg/c.py"):
        (tmp_path / name).write_text("x = 1\n" * (MODULE_SOFT_LIMIT + 1))
    (tmp_path / "d.py").write_text("x = 1\n" * MODULE_SOFT_LIMIT)
    assert crowded(tmp_path, most=3) is None
    assert crowded(tmp_path, most=2) == (
        f"3 modules over {MODULE_SOFT_LIMIT} lines, at most 2: split one along its seam: "
        f"['a.py: {MODULE_SOFT_LIMIT + 1} lines', 'b.py: {MODULE_SOFT_LIMIT + 1} lines', "
        f"'pkg/c.py: {MODULE_SOFT_LIMIT + 1} lines']")
