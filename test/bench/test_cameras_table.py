"""README's several-cameras tables are the ones bench/results/cameras_cpu.json and
cameras_emulated_cpu.json make (bench.cameras)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dla_infer_node.bench.cameras import markdown_table

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["cameras_cpu.json", "cameras_emulated_cpu.json"])
def test_readme_table_is_the_results_file(name: str) -> None:
    doc = json.loads((REPO / "bench" / "results" / name).read_text())
    assert markdown_table(doc) in (REPO / "README.md").read_text(), "README.md's cameras table is out of date"
    one = next(r for r in doc["runs"] if (r["cameras"], r["cores"], r["mode"]) == (4, 2, "one"))
    per = next(r for r in doc["runs"] if (r["cameras"], r["cores"], r["mode"]) == (4, 2, "per_camera"))
    assert one["processes"] == 1 and per["processes"] == 4
    assert all(len(r["per_camera"]) == r["cameras"] for r in doc["runs"])
