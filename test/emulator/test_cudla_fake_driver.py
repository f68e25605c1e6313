"""The emulator-backed tests of test_gpu/ (marker ``emulated``) on a machine WITHOUT a GPU: the DLA
EMULATOR runs over a fake CUDA driver (emulator/testing/), through the real cuda.bindings.cudla.

This checks the binding <-> emulator <-> backend wiring, every io format end to end, the network program
(the real model through the emulated DLA, few frames), the contract checks and frames in flight in CI
(the fake driver's streams are asynchronous, so stream ordering is exercised too); device memory and the
GPU input path need the real GPU run (scripts/test_gpu.sh).
Skipped when cuda-bindings, a C compiler or the CUDA headers (cuda.h) are missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cuda_include() -> str | None:
    for root in (os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        if root and Path(root, "include", "cuda.h").is_file():
            return root
    return None


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None
                    or importlib.util.find_spec("cuda.bindings") is None, reason="cuda-bindings missing")
@pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="no C compiler")
@pytest.mark.skipif(_cuda_include() is None, reason="CUDA headers (cuda.h) missing")
def test_emulated_suite_on_fake_driver(tmp_path: Path) -> None:
    env = dict(os.environ, DLA_TEST_FAKE_DRIVER="1", DLA_EMULATOR_BUILD=str(tmp_path),
               CUDA_HOME=str(_cuda_include()), PYTHONPATH=str(ROOT))
    env.pop("DLA_EMULATOR_LIB", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "emulated",
                           "test_gpu/test_cudla_emulated.py", "test_gpu/test_cudla_contract.py",
                           "test_gpu/test_cudla_fault.py", "test_gpu/test_cudla_network.py",
                           "test_gpu/test_cudla_timing.py", "test_gpu/test_cudla_pipelined.py",
                           "test_gpu/test_cudla_host_thread.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert " passed" in tail and "failed" not in tail
