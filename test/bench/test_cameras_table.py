"""README's several-cameras tables are the ones bench/results/cameras_cpu.json and
cameras_emulated_cpu.json make (bench.cameras), and its one-frame-in-flight figures those of
cameras_emulated_cpu_one_in_flight.json."""

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


def test_readme_cites_the_one_frame_in_flight_run() -> None:
    """The sentence comparing two frames in flight per core with one quotes the run of the one-in-flight
    results file (four cameras on one core, backend cudla with frames_in_flight:=1)."""
    doc = json.loads((REPO / "bench" / "results" / "cameras_emulated_cpu_one_in_flight.json").read_text())
    assert "frames_in_flight:=1" in doc["node_parameters"]
    run = next(r for r in doc["runs"] if (r["cameras"], r["cores"], r["mode"]) == (4, 1, "one"))
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"frames_in_flight:=1 --out bench/results/cameras_emulated_cpu_one_in_flight.json`) answers " \
           f"{100 * run['processed_ratio']:.1f} %" in readme
    assert f"against {run['latency_ms']['p50']:.0f} ms one at a time" in readme
