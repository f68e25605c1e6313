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


@pytest.mark.parametrize(("fmt", "dtype"), gpu.LAYOUTS)
def test_echo_artifacts_open_in_the_backend(tmp_path: Path, fmt: str, dtype: str) -> None:
    art = bench_gpu._echo_artifact(tmp_path, fmt, dtype)
    artifact = open_artifact(str(art.loadable), str(art.sidecar))
    assert (artifact.metadata.input.width, artifact.metadata.input.height) == (640, 640)
    assert len(artifact.metadata.outputs) == 3


def _main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> dict[str, Any]:
    # the kernel part and the environment facts need a GPU; their places in the results are what counts here
    monkeypatch.setattr(gpu, "bench_kernels", lambda iters, trials, encodings: {"layouts": {}})
    monkeypatch.setattr(gpu, "_environment", lambda: {})
    out = tmp_path / "gpu.json"
    assert gpu.main(["--out", str(out), "--frames", "7"], **kwargs) == 0
    return json.loads(out.read_text())


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
