"""A spark-submit application for tests/integration/test_metrics.py: builds its session the auditor's way
(aldebaran.runtime.spark.session with aldebaran.runtime.metrics.spark_conf()), runs a rate query for a few seconds and
writes what its Spark UI serves to the JSON file named by its argument."""

import json
import sys
import time
import urllib.request

from aldebaran.runtime import metrics
from aldebaran.runtime import spark as sparkmod


def main(out: str) -> None:
    spark = sparkmod.session("aldebaran-metrics-ui", conf=metrics.spark_conf())
    url = spark.sparkContext.uiWebUrl
    query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
             .writeStream.format("noop").queryName("metricsui").start())
    try:
        time.sleep(6)
        found = {"ui": url, "ui_enabled": spark.conf.get("spark.ui.enabled")}
        if url:
            for path in ("/metrics/prometheus", "/metrics/executors/prometheus"):
                with urllib.request.urlopen(url + path, timeout=10) as resp:
                    found[path] = resp.read().decode()
    finally:
        query.stop()
    with open(out, "w") as fh:
        json.dump(found, fh)


if __name__ == "__main__":
    main(sys.argv[1])
