"""``aldebaran bench steady``: a steady load on the platform as ``make demo`` leaves it (default: 5,000 events/s
for 5 minutes in the original publisher's mix, through ``aldebaran loadgen --watch``), then the check that
the deployed path holds under steady load — no supervisor restarted the auditor or a dispatcher (the pids
behind their heartbeats never changed), and every OVERFILL the reference model expects is in the ``log`` channel's file exactly
once. Exit code 0 only if both hold. Needs the demo's platform running (`make demo`).
"""

from __future__ import annotations

import collections
import json
import logging
import subprocess
import sys
import time

log = logging.getLogger(__name__)


def run(rate: int, seconds: float, linger: float = 30.0, seed: int | None = None) -> dict:
    from aldebaran.runtime import paths
    from aldebaran.delivery.channels import configured_channels
    from aldebaran_lab.deployed_parts import DeployedError, Watcher, auditor_running

    if not auditor_running("auditor"):
        raise DeployedError("the auditor is not running: run `make demo` first")
    watcher = Watcher("auditor", ["log"])
    watcher.start()
    watcher.sample()
    path = configured_channels(["log"])[0].path
    start = path.stat().st_size if path.exists() else 0
    # A new seed each run: the same seed again would send the same order and event ids, which the running
    # auditor's books deduplicate (no alert), while the reference model expects them.
    seed = seed if seed is not None else int(time.time())
    expected_path = paths.run_dir() / "bench" / f"steady-{seed}-expected.json"
    t0 = time.time()
    rc = subprocess.call([sys.executable, "-m", "aldebaran.cli.main", "loadgen", "--rate", str(rate), "--seconds",
                          str(seconds), "--seed", str(seed), "--watch", "--watch-linger", str(linger),
                          "--expected", str(expected_path)])
    watcher.sample()
    watcher.stop()
    want = {a["alert_id"] for a in json.loads(expected_path.read_text())["alerts"] if a["kind"] == "OVERFILL"}
    seen: collections.Counter = collections.Counter()
    with open(path, "rb") as fh:
        fh.seek(start)
        for line in fh:
            try:
                seen[json.loads(line)["alert"]["alert_id"]] += 1
            except (ValueError, KeyError):
                continue  # a torn last line: not a delivery
    return {"rate": rate, "seconds": seconds, "seed": seed, "loadgen_rc": rc, "wall_s": round(time.time() - t0),
            "restarts": watcher.restarts(), "pids": watcher.pids, "expected_overfills": len(want),
            "delivered_log": len(want & set(seen)), "missing_log": len(want - set(seen)),
            "twice_log": sum(1 for a in want if seen[a] > 1), "auditor_batches_seen": len(watcher.batches)}


def main(args) -> int:
    rate = int((args.rates or "5000").split(",")[0])
    seconds = args.seconds if args.seconds != 20.0 else 300.0  # the bench parser's shared default is e2e's
    result = run(rate, seconds)
    print(json.dumps(result, indent=1))
    ok = (result["loadgen_rc"] == 0 and not result["restarts"] and result["missing_log"] == 0
          and result["twice_log"] == 0)
    log.info("steady: %s", "ok" if ok else "FAILED")
    return 0 if ok else 1
