"""What a benchmark ran on: cores, memory, versions, date — printed with every figure."""

from __future__ import annotations

import datetime as dt
import os
import platform


def describe() -> dict:
    mem_gib = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from importlib.metadata import version

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "cpu": cpu,
        "python": platform.python_version(),
        "pyspark": version("pyspark"),
        "confluent_kafka": version("confluent-kafka"),
        "boto3": version("boto3"),
        "load_avg_at_start": os.getloadavg()[0],
    }
