from aldebaran_capacity.bench import parse_cost

MACHINE = {"date": "2026-11-23 12:00 UTC", "cores": 2, "memory_gib": 23.5, "pyspark": "4.2.0"}


def _result():
    return {"events": 1000, "orders": 200, "repeats": 3, "load_avg": 2.5,
            "rows": {"read": {"median_s": 0.5, "eps": 2000.0, "runs_s": [0.5, 0.4, 0.6]},
                     "from_json": {"median_s": 1.0, "eps": 1000.0, "runs_s": [1.0, 1.0, 1.1]},
                     "parse": {"median_s": 4.0, "eps": 250.0, "runs_s": [4.0, 3.9, 4.2]},
                     "batch": {"median_s": 5.0, "eps": 200.0, "runs_s": [5.0, 5.1, 4.9]}}}


def test_render_ratios_to_the_kafka_read():
    section = parse_cost.render(_result(), MACHINE, "aldebaran bench parse-cost")
    assert section.startswith(parse_cost.BEGIN) and section.endswith(parse_cost.END)
    assert "| Kafka source only (values fetched, nothing parsed) | 2,000 | 1.00 | 0.50 | 0.50, 0.40, 0.60 |" in section
    assert "(`parse_events`: regex-proved fast path, else VARIANT; every DLQ reason) | 250 | 0.12 | 4.00 |" in section
    assert "the batch ceiling of the other sections) | 200 | 0.10 | 5.00 |" in section
    assert "median of 3 rounds" in section and "load average at the end 2.50" in section


def test_splice_replaces_only_its_section():
    doc = "# Benchmarks\n\n<!-- state-design:begin -->\nkeep\n<!-- state-design:end -->\n"
    section = parse_cost.render(_result(), MACHINE, "cmd")
    once = parse_cost.splice(doc, section)
    assert "keep" in once and once.count(parse_cost.BEGIN) == 1
    twice = parse_cost.splice(once, section.replace("2,000", "3,000"))
    assert twice.count(parse_cost.BEGIN) == 1 and "3,000" in twice and "keep" in twice
