"""The capacity_test DAG's one call: run the load generator and the measurements of
aldebaran_capacity.bench.suite with the trigger form's Params against the running platform (its Kafka and
object store; Spark local[2] in the task), then store the report — markdown and PNG plots — in the
object store under ``reports/capacity/<run id>/`` and return it as the task's output."""

from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path

from aldebaran.exceptions import AldebaranError, ConfigError

log = logging.getLogger(__name__)

PREFIX = "reports/capacity"
SECTIONS = ("drain", "latency", "books", "churn", "dispatch", "e2e")


def config_from_params(params: dict):
    """Trigger-form Params → a suite Config (unknown mix keys and bad values fail here, named)."""
    from dataclasses import fields

    from aldebaran_capacity.bench.dispatch import CORE_CHANNELS
    from aldebaran_capacity.bench.suite import Config
    from aldebaran_capacity.loadgen import Mix

    try:
        rates = [int(r) for r in params.get("rates") or []]
        books = [int(b) for b in params.get("books") or []]
        duration = float(params.get("duration_seconds") or 10)
        sections = tuple(params.get("sections") or SECTIONS)
        mix_params = dict(params.get("mix") or {})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"capacity_test params: {exc}") from exc
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"capacity_test param 'sections': unknown {sorted(unknown)}; known: {list(SECTIONS)}")
    allowed = {f.name for f in fields(Mix)} - {"orders", "id_prefix"}
    bad = set(mix_params) - allowed
    if bad:
        raise ConfigError(f"capacity_test param 'mix': unknown keys {sorted(bad)}; allowed: {sorted(allowed)}")
    if any(r <= 0 for r in rates) or any(b <= 0 for b in books) or duration <= 0:
        raise ConfigError("capacity_test params 'rates', 'books' and 'duration_seconds' must be positive")
    try:
        mix = Mix(**{**Config().mix.__dict__, **mix_params})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"capacity_test param 'mix': {exc}") from exc
    drain_orders = int(params.get("drain_orders") or 100_000)
    return Config(drain_orders=drain_orders, drain_repeats=1, rates=rates, latency_seconds=duration,
                  book_sizes=books, churn_orders=int(params.get("churn_orders") or 50_000),
                  dispatch_alerts=int(params.get("dispatch_alerts") or 1000), dispatch_repeats=1,
                  dispatch_channels=CORE_CHANNELS, mix=mix,
                  e2e_rates=rates, e2e_seconds=duration,
                  sections=sections, quick=True)


def run(params: dict, run_id: str) -> dict:
    """Measure, store the report in the object store, return its location, markdown and verdict.
    Raises when a run's alerts differ from the reference model (after storing the report)."""
    from aldebaran.storage.store import open_store
    from aldebaran_capacity.bench import report, suite

    config = config_from_params(params)
    results = suite.run(config)
    results["command"] = f"capacity_test DAG run {run_id} (aldebaran_capacity.bench.capacity.run)"
    store = open_store()
    prefix = f"{PREFIX}/{re.sub(r'[^A-Za-z0-9._-]+', '_', run_id)}"
    with tempfile.TemporaryDirectory(prefix="capacity-") as tmp:
        written = report.write(results, Path(tmp), doc_name="report.md")
        keys = {}
        for name, path in written.items():
            rel = path.relative_to(tmp).as_posix()
            content_type = {"md": "text/markdown", "png": "image/png", "json": "application/json"}[path.suffix[1:]]
            keys[name] = f"{prefix}/{rel}"
            store.put(keys[name], path.read_bytes(), content_type=content_type)
        markdown = written["markdown"].read_text()
    out = {"report_uri": store.uri(keys["markdown"]), "objects": {k: store.uri(v) for k, v in keys.items()},
           "correct": results["correct"], "markdown": markdown,
           "sections": {s: {"correct": results[s].get("correct"), "seconds": round(results[s]["seconds"], 1)}
                        for s in config.sections}}
    log.info("capacity report stored at %s", out["report_uri"])
    if not results["correct"]:
        bad = [s for s in config.sections if not results[s].get("correct")]
        raise AldebaranError(f"capacity test: alerts differ from the reference model in {bad}; report at {out['report_uri']}")
    return out
