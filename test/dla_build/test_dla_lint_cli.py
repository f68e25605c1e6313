"""``dla_build lint`` as a command: the shipped model lints clean, exit status 1 names the offending
nodes, bad input is one line with exit status 2, ``--json``; and the ultralytics exports (when the fixture
files are present) fail with their Detect head named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _lint_graphs import REPO, SHIPPED, YOLO_FIXTURES, yolov8_like_head


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dla_infer_node.dla_build.build_cli", "lint", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_cli_shipped_model_is_clean() -> None:
    done = run_cli(str(SHIPPED))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--buildDLAStandalone: can build" in done.stdout.splitlines()[-1]
    report = json.loads(run_cli(str(SHIPPED), "--json").stdout)
    assert report["standalone_ok"] and report["counts"]["gpu-fallback"] == 0
    assert {r["verdict"] for r in report["rows"]} <= {"ok", "dla", "folded"}


def test_cli_names_offending_nodes_and_exits_1(tmp_path: Path) -> None:
    done = run_cli(str(yolov8_like_head(tmp_path)))
    assert done.returncode == 1
    assert "cannot build; offending:" in done.stdout and "/model.22/Sigmoid" in done.stdout
    report = json.loads(run_cli(str(tmp_path / "m.onnx"), "--json").stdout)
    assert "/model.22/Concat_5" in report["offending"]


@pytest.mark.parametrize("make", ["missing", "not_onnx"])
def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, make: str) -> None:
    path = tmp_path / "x.onnx"
    if make == "not_onnx":
        path.write_text("this is not a protobuf\n" * 3)
    done = run_cli(str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("dla_build lint: [model]") and str(path) in done.stderr
    bad_batch = run_cli(str(SHIPPED), "--batch", "0")
    assert bad_batch.returncode == 2 and "--batch" in bad_batch.stderr


@pytest.mark.parametrize("name", ["yolov8n_320.onnx", "yolo11n_320.onnx", "yolov5nu_320.onnx"])
def test_untrimmed_ultralytics_export_names_head_nodes(name: str) -> None:
    path = YOLO_FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{path} absent: ultralytics exports are made by tools/make_yolo_fixtures.py")
    done = run_cli(str(path))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr
    report = json.loads(run_cli(str(path), "--json").stdout)
    # all three exports carry the v8 Detect head: its DFL (Reshape -> Softmax -> Conv) and the decode after
    assert any("/dfl/" in n for n in report["offending"]), report["offending"]
    assert any(n.split("/")[-1].startswith(("Concat", "Sigmoid", "Mul", "Div", "Sub", "Add"))
               for n in report["offending"]), report["offending"]
    assert "cannot build; offending:" in done.stdout
