"""The core benchmark runs end to end and writes every figure it prints (no timing is asserted here)."""

from __future__ import annotations

import json
from pathlib import Path

from dla_infer_node.bench import core as bench_core


def test_quick_run_writes_all_sections(tmp_path: Path) -> None:
    out = tmp_path / "core.json"
    assert bench_core.main(["--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    shortcut, general = result["preprocess"], result["preprocess_general"]
    assert shortcut["resize_path"].startswith("INTER_NEAREST_EXACT")
    assert general["resize_path"] == "INTER_LINEAR"
    assert shortcut["model_input"] == [640, 512]  # the shipped model
    assert shortcut["resized"] == [640, 360] and general["resized"] == [512, 288]
    for p in (shortcut, general):
        assert len(p["ratio_per_block"]) == len(p["block_started_s"]) == 2
        assert min(p["ratio_per_block"]) <= p["ratio_median_of_blocks"] <= max(p["ratio_per_block"])
    # the shortcut has two ways, both also timed forced; the general path has one
    assert all(set(b) == {"fused_gather", "usual_path"} for b in shortcut["forced_way_ratio_per_block"])
    assert general["forced_way_ratio_per_block"] == [{}, {}]
    assert general["fused_gather_chosen_per_block"] == [False, False]
    assert result["decode"]["yolov8_8400"]["candidates"] == 8400
    assert {(r["format"], r["dtype"]) for r in result["layouts"]} >= {("chw16", "fp16"), ("chw32", "int8")}
