"""Alert lanes besides the exact auditor: the low-latency lane in Spark's real-time mode, reconciled with it."""
