"""The encodings benchmark runs end to end and writes every figure it prints (no timing is asserted here)."""

from __future__ import annotations

import json
from pathlib import Path

from dla_infer_node.bench import encodings as bench_encodings


def test_quick_run_writes_every_encoding(tmp_path: Path) -> None:
    out = tmp_path / "encodings.json"
    assert bench_encodings.main(["--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["frame"] == [1920, 1080] and result["model_input"] == [640, 512]  # the shipped model
    rows = result["encodings"]
    assert set(bench_encodings.ENCODINGS) <= set(rows)
    assert rows["rgb8"]["ratio_per_block"] == [1.0, 1.0]
    for name in ("yuyv", "uyvy", "nv12", "nv21", "rgb16", "mono16", "bayer_rggb8", "bayer_rggb16"):
        # 1080p -> 640x360 is the 3x shortcut: gathered (Bayer after its demosaic)
        assert "gathered" in rows[name]["path"], name
        assert rows[f"{name} (convert, then preprocess)"]["path"].startswith("whole-frame")
        assert len(rows[name]["ratio_per_block"]) == 2


def test_readme_carries_the_measured_table() -> None:
    repo = Path(__file__).resolve().parents[2]
    result = json.loads((repo / "bench" / "results" / "encodings.json").read_text())
    # regenerate with: python -m dla_infer_node.bench.encodings --table
    assert bench_encodings.table(result) in (repo / "README.md").read_text(encoding="utf-8")
