"""README's several-cameras table is the one bench/results/cameras_cpu.json makes (bench.cameras)."""

from __future__ import annotations

import json
from pathlib import Path

from dla_infer_node.bench.cameras import markdown_table

REPO = Path(__file__).resolve().parents[2]


def test_readme_table_is_the_results_file() -> None:
    doc = json.loads((REPO / "bench" / "results" / "cameras_cpu.json").read_text())
    assert markdown_table(doc) in (REPO / "README.md").read_text(), "README.md's cameras table is out of date"
    one = next(r for r in doc["runs"] if (r["cameras"], r["cores"], r["mode"]) == (4, 2, "one"))
    per = next(r for r in doc["runs"] if (r["cameras"], r["cores"], r["mode"]) == (4, 2, "per_camera"))
    assert one["processes"] == 1 and per["processes"] == 4
    assert all(len(r["per_camera"]) == r["cameras"] for r in doc["runs"])
