"""The GPU benchmark's CPU-side parts: ``make bench-gpu`` runs emulator/bench_gpu.py, which hands its
DLA EMULATOR part to ``dla_infer_node.bench.gpu.main`` (the installed package never imports the emulator);
the echo artifacts it times open in the cuDLA backend's artifact reader. The timed runs need a GPU
(``make bench-gpu`` on the GPU machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dla_infer_node.backends.cudla import open_artifact
from dla_infer_node.bench import gpu

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the emulator is a folder of the checkout, not installed
from emulator import bench_gpu  # noqa: E402

SHIPPED_CHUNKS = dict(gpu.pk.CHUNK_BYTES)


@pytest.mark.parametrize(("fmt", "dtype"), gpu.LAYOUTS)
def test_echo_artifacts_open_in_the_backend(tmp_path: Path, fmt: str, dtype: str) -> None:
    art = bench_gpu._echo_artifact(tmp_path, fmt, dtype)
    artifact = open_artifact(str(art.loadable), str(art.sidecar))
    assert (artifact.metadata.input.width, artifact.metadata.input.height) == (640, 640)
    assert len(artifact.metadata.outputs) == 3


def _main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *argv: str, **kwargs: Any) -> dict[str, Any]:
    # the kernel part and the environment facts need a GPU; their places in the results are what counts here
    monkeypatch.setattr(gpu, "bench_kernels", lambda iters, trials, **kw: {"layouts": {}, "asked": kw})
    monkeypatch.setattr(gpu, "_environment", lambda: {})
    monkeypatch.setattr(gpu.pk, "CHUNK_BYTES", dict(SHIPPED_CHUNKS))  # --chunk-bytes changes it
    out = tmp_path / "gpu.json"
    assert gpu.main(["--out", str(out), "--frames", "7", *argv], **kwargs) == 0
    return json.loads(out.read_text())


def test_frame_layouts_and_chunk_bytes_reach_the_kernel_part(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    res = _main(tmp_path, monkeypatch, "--frame", "1280x720", "--layouts", "linear/fp16,chw32/int8",
                "--chunk-bytes", "2x1=8,1x1=1")
    assert res["kernel"]["asked"] == {"encodings": True, "size": [1280, 720],
                                      "layouts": [["linear", "fp16"], ["chw32", "int8"]]}
    assert res["kernel"]["chunk_bytes"]["2x1"] == 8 and res["kernel"]["chunk_bytes"]["1x1"] == 1
    assert _main(tmp_path, monkeypatch)["kernel"]["chunk_bytes"]["2x1"] == 4  # the shipped choice


def test_source_rows_the_kernel_reads() -> None:
    """1080p -> 640x360 reads every third row (one tap row of non-zero weight); Bayer's 3x3 windows take
    every row; NV12 adds the chroma rows of the luma rows read; 720p -> 640x360 (2:1) reads every row."""
    assert gpu.source_row_bytes("rgb8", 1920, 1080) == 360 * 1920 * 3
    assert gpu.source_row_bytes("bgra16", 1920, 1080) == 360 * 1920 * 8
    assert gpu.source_row_bytes("bayer_rggb8", 1920, 1080) == 1080 * 1920
    assert gpu.source_row_bytes("nv12", 1920, 1080) == (360 + 360) * 1920  # chroma rows (3d + 1) // 2
    assert gpu.source_row_bytes("yuyv", 1280, 720) == 720 * 1280 * 2


@pytest.mark.parametrize("argv,needle", [(["--frame", "1280"], "WxH"),
                                         (["--layouts", "linear/int16"], "not among"),
                                         (["--chunk-bytes", "2x4=4"], "does not fit"),
                                         (["--chunk-bytes", "4x1=4"], "no kernel variant")])
def test_bad_bench_options_are_refused(argv: list[str], needle: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        gpu.main(argv)
    assert needle in capsys.readouterr().err


def test_the_emulator_part_is_plugged_in_or_said_missing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    assert _main(tmp_path, monkeypatch)["end_to_end"] == {"skipped": gpu.NO_EMULATOR}
    part = _main(tmp_path, monkeypatch, end_to_end=lambda frames: {"frames": frames})
    assert part["end_to_end"] == {"frames": 7}


def test_make_bench_gpu_runs_the_emulator_entry_point() -> None:
    dry = subprocess.run(["make", "-n", "bench-gpu"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "-m emulator.bench_gpu --out bench/results/gpu.json" in dry.stdout
    helped = subprocess.run([sys.executable, "-m", "emulator.bench_gpu", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "--skip-e2e" in helped.stdout, helped.stderr
