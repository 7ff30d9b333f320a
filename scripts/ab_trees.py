"""Same-run A/B of two revisions of the tree: runs one `aldebaran bench all` command alternately in a
worktree of an earlier revision (A) and in this tree (B), A-B, B-A, A-B, ..., then prints each figure's
median per side and the B/A ratio.

Used to show that a refactor did not slow the measured paths (drain, dispatch) down: both sides share
the box, the services and the venv in one run, so the ratio compares like with like.

    .venv/bin/python scripts/ab_trees.py 0b1388b --repeats 3 --out .run/ab \\
        -- --sections drain,dispatch --set drain_orders=100000 --set dispatch_alerts=5000

The worktree lives under ~/.cache/aldebaran/ab/<rev> (outside the work tree); both sides use this
tree's venv, .env and run directory (the services already up), with PYTHONPATH pointing at the side's
include/.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("ab_trees")

# (label, path in bench-results.json): the figures compared; missing ones are skipped.
FIGURES = [
    ("drain auditor events/s", ("drain", "auditor_eps")),
    ("drain auditor/batch ceiling", ("drain", "spark_batch", "auditor_ratio")),
    ("drain Spark batch events/s", ("drain", "spark_batch", "eps")),
    ("dispatch webhook deliveries/s", ("dispatch", "channels", "webhook", "deliveries_eps")),
    ("dispatch webhook_batch deliveries/s", ("dispatch", "channels", "webhook_batch", "deliveries_eps")),
    ("dispatch bus deliveries/s", ("dispatch", "channels", "bus", "deliveries_eps")),
    ("dispatch log deliveries/s", ("dispatch", "channels", "log", "deliveries_eps")),
    ("dispatch bus ledger writes/delivery", ("dispatch", "channels", "bus", "ledger_writes_per_delivery")),
]


def worktree(rev: str) -> Path:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", rev], check=True, text=True,
                         capture_output=True).stdout.strip()
    path = Path.home() / ".cache" / "aldebaran" / "ab" / sha
    if not (path / "include").is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha], check=True)
    return path


def run_side(tree: Path, out: Path, bench_args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "include"), "ALDEBARAN_ENV_FILE": str(ROOT / ".env"),
           "ALDEBARAN_RUN_DIR": str(ROOT / ".run")}
    # The side's own CLI module, not the venv's console script: the script names this tree's module
    # (aldebaran.cli.main), which an older side may not have (it had aldebaran/cli.py).
    cli = "aldebaran.cli.main" if (tree / "include" / "aldebaran" / "cli" / "main.py").is_file() else "aldebaran.cli"
    cmd = [str(ROOT / ".venv" / "bin" / "python"), "-c", f"import sys; from {cli} import main; sys.exit(main())",
           "bench", "all", "--out", str(out), *bench_args]
    from aldebaran_capacity.bench.boxstate import BoxSampler, wait_for_quiet

    # Airflow counts as "other" here: neither bench section uses it, so its DAG work would only be noise.
    wait_for_quiet(foreign=("airflow",), log=log)
    log.info("%s: %s", tree, " ".join(cmd))
    sampler = BoxSampler(foreign=("airflow",))
    sampler.start()
    try:
        subprocess.run(cmd, check=True, env=env, cwd=tree)
    finally:
        box = sampler.stop()
    result = json.loads((out / "img" / "bench-results.json").read_text())
    result["box"] = box
    return result


def pick(result: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(result, dict) or key not in result:
            return None
        result = result[key]
    return result


def main() -> int:
    from aldebaran.runtime import logs

    logs.setup("ab-trees")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rev_a", help="the earlier revision (A)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / ".run" / "ab")
    p.add_argument("--b-extra", action="append", default=[], metavar="ARG",
                   help="an argument for side B only, e.g. --b-extra=--set --b-extra=dispatch_channels=webhook,bus "
                        "(a setting A does not know yet, holding B to what A measures)")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="after --: arguments of `aldebaran bench all`")
    a = p.parse_args()
    bench_args = [x for x in a.bench_args if x != "--"]
    a.out = a.out.resolve()  # each side runs in its own tree
    sides = {"A": worktree(a.rev_a), "B": ROOT}
    results: dict[str, list[dict]] = {"A": [], "B": []}
    for i in range(a.repeats):
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
            extra = a.b_extra if side == "B" else []
            results[side].append(run_side(sides[side], a.out / f"{side}{i + 1}", [*bench_args, *extra]))
    rows = []
    for label, path in FIGURES:
        vals = {s: [v for v in (pick(r, path) for r in results[s]) if isinstance(v, (int, float))] for s in "AB"}
        if not vals["A"] or not vals["B"]:
            continue
        ma, mb = statistics.median(vals["A"]), statistics.median(vals["B"])
        rows.append({"figure": label, "A": vals["A"], "B": vals["B"], "median_A": ma, "median_B": mb,
                     "ratio_B_to_A": mb / ma if ma else None})
    summary = {"rev_a": a.rev_a, "rev_b": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
               text=True, capture_output=True).stdout.strip(), "repeats": a.repeats, "bench_args": bench_args,
               "order": "A-B, B-A, A-B, ...", "rows": rows,
               "box": {s: [{k: r["box"].get(k) for k in ("quiet", "load1_mean", "other_cores_mean", "top_other")}
                           for r in results[s]] for s in "AB"}}
    (a.out / "ab-summary.json").write_text(json.dumps(summary, indent=2))
    for row in rows:
        sys.stdout.write(f"{row['figure']:<40} A {row['median_A']:>12,.4g}  B {row['median_B']:>12,.4g}  "
                         f"B/A {row['ratio_B_to_A']:.2f}\n")
    quiet = all(r["box"].get("quiet") for side in results.values() for r in side)
    sys.stdout.write(f"quiet box in every run: {'yes' if quiet else 'NO (see box in ab-summary.json)'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
