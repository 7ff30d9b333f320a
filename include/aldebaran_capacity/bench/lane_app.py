"""The lane's spark-submit application with a plan variant, for ``aldebaran bench lane-tuning`` only.

    spark-submit ... lane_app.py --variant no-dedupe <the arguments of spark_apps/realtime_lane.py>

``no-dedupe``: the lane with one stateful operator (the aggregation) instead of two: what folding the dedupe
into the aggregation could gain at most. Wrong when an event arrives twice, so it is never the product; the
benchmark's mix has no duplicate events, so its alerts are still checked against the reference model.
"""

import functools
import runpy
import sys
from pathlib import Path

VARIANTS = ("no-dedupe",)


def main(argv: list[str]) -> int:
    from aldebaran.lanes import realtime

    if len(argv) < 2 or argv[0] != "--variant" or argv[1] not in VARIANTS:
        raise SystemExit(f"usage: lane_app.py --variant {{{','.join(VARIANTS)}}} <realtime_lane.py arguments>")
    transform = functools.partial(realtime.plan, dedupe=False)
    app = Path(__file__).resolve().parents[3] / "spark_apps" / "realtime_lane.py"
    return runpy.run_path(str(app))["main"](argv[2:], transform=transform)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
