"""A bench mode's report (aldebaran_capacity.bench.sections): its section between its markers in
docs/benchmarks.md, its key in docs/img/bench-results.json, everything else kept."""

from __future__ import annotations

import json

from aldebaran_capacity.bench import sections


def test_a_report_replaces_its_section_and_its_key_and_keeps_the_rest(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "benchmarks.md").write_text("# B\n\n<!-- x -->\nold\n<!-- /x -->\n\nhand-written\n")
    (tmp_path / "img" / "bench-results.json").write_text(json.dumps({"x": {"old": 1}, "y": 2}))
    result = {"x": {"figure": 3}, "command": "aldebaran bench x", "machine": {"cores": 2}}
    sections.write_report(tmp_path, "x", result, "<!-- x -->\nnew\n<!-- /x -->", "<!-- x -->", "<!-- /x -->")
    assert (tmp_path / "benchmarks.md").read_text() == "# B\n\n<!-- x -->\nnew\n<!-- /x -->\n\nhand-written\n"
    data = json.loads((tmp_path / "img" / "bench-results.json").read_text())
    assert data == {"x": {"figure": 3, "command": "aldebaran bench x", "machine": {"cores": 2}}, "y": 2}
