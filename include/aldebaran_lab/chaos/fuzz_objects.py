"""`aldebaran chaos fuzz`, the object store's targets run one after another in a bucket of the campaign's own:
the ledger's (aldebaran_lab.chaos.fuzz_store) and the platform state's (aldebaran_lab.chaos.fuzz_state)."""

from __future__ import annotations

import logging
import time

from aldebaran_lab.chaos import fuzz_state, fuzz_store

log = logging.getLogger(__name__)

TARGETS = ("records", "index_keys", "runs", "owners", "heartbeats", "leases", "plans")


def run_store(inputs: int = 10_000, seed: int = 7, targets: tuple = TARGETS) -> dict:
    """Each object kind with `inputs` hostile objects, in a bucket of its own (dropped at the end)."""
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.delivery.records import RetryPolicy
    from aldebaran.settings import KafkaSettings, load
    store = fuzz_store.private_store()
    kafka = load(KafkaSettings)
    out = {}
    try:
        for i, name in enumerate(targets):
            ledger = Ledger(store, prefix=f"fuzz/{name}/deliveries", policy=RetryPolicy(5, 0.0, 0.0))
            t0 = time.monotonic()
            try:
                if name in ("records", "index_keys"):
                    out[name] = getattr(fuzz_store, name)(ledger, kafka, inputs, seed + i)
                elif name in ("runs", "owners"):
                    out[name] = getattr(fuzz_store, name)(ledger, inputs, seed + i)
                else:
                    out[name] = getattr(fuzz_state, name)(store, inputs, seed + i)
            except Exception as exc:  # noqa: BLE001 - outside any one reader (planting, generating): a failure
                out[name] = {"inputs": 0, "crashes": 1, "crash_examples": [f"{type(exc).__name__}: {exc}"[:300]],
                             "seconds": round(time.monotonic() - t0, 1)}
            log.info("fuzz store %s: %s", name, out[name])
    finally:
        fuzz_store.drop_store(store)
    return out


def failures(store: dict, inputs: int) -> list[str]:
    out = []
    for name, r in store.items():
        if r.get("crashes") or r.get("unaccounted"):
            out.append(f"store {name}: {r.get('crashes')} crash(es), {r.get('unaccounted')} unaccounted: "
                       f"{r.get('crash_examples')}")
        elif r["inputs"] < inputs:
            out.append(f"store {name}: {r['inputs']} inputs of {inputs}")
    return out
