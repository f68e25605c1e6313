"""Fixtures for the cuDLA tests that run against the DLA EMULATOR (test infrastructure).

Modes:
* default (GPU machine, scripts/test_gpu.sh): the emulator drives the real CUDA driver; the backend uses
  the real ``dla_infer_node.backends.cuda_runtime``.
* ``DLA_TEST_FAKE_DRIVER=1`` (CPU CI, via test/emulator/test_cudla_fake_driver.py): the emulator drives a fake
  libcuda.so.1 (emulator/testing/fake_libcuda.c, asynchronous streams) and the backend a fake runtime;
  tests that need device memory, kernels or a thread's CUDA context are skipped (marker ``gpu_only``).

The emulator is built here (emulator/build.sh) unless ``DLA_EMULATOR_LIB`` names a built one, and loaded
before the binding's first call, so ``cuda.bindings.cudla`` binds to it (cuda.pathfinder: already loaded).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FAKE = os.environ.get("DLA_TEST_FAKE_DRIVER") == "1"
_OWN_BUILD = not os.environ.get("DLA_EMULATOR_BUILD")  # a folder we make, we remove (pytest_unconfigure)
_BUILD = Path(os.environ.get("DLA_EMULATOR_BUILD") or tempfile.mkdtemp(prefix="dla-emu-"))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_BUILD:  # the loaded library stays mapped; its file is no longer needed
        shutil.rmtree(_BUILD, ignore_errors=True)


def _build() -> tuple[Path, Path | None]:
    lib = os.environ.get("DLA_EMULATOR_LIB")
    emu = Path(lib) if lib else None
    if emu is None or not emu.is_file():
        subprocess.run(["bash", str(ROOT / "emulator" / "build.sh"), str(_BUILD)], check=True,
                       stdout=subprocess.DEVNULL)
        emu = _BUILD / "libcudla.so.1"
    fake = None
    if FAKE:
        fake_dir = _BUILD / "fake"
        fake_dir.mkdir(exist_ok=True)
        fake = fake_dir / "libcuda.so.1"
        cuda_h = next((p for p in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda")
                       if p and Path(p, "include", "cuda.h").is_file()), None)
        if cuda_h is None:
            pytest.exit("fake driver mode needs cuda.h (set CUDA_HOME)", returncode=2)
        cc = shutil.which("gcc") or shutil.which("cc") or "cc"
        subprocess.run([cc, "-std=c11", "-D_GNU_SOURCE", "-O1", "-fPIC", "-shared", "-fvisibility=hidden",
                        f"-I{cuda_h}/include", "-Wl,-soname,libcuda.so.1", "-o", str(fake),
                        str(ROOT / "emulator" / "testing" / "fake_libcuda.c")], check=True)
    return emu, fake


EMU_PATH, FAKE_CUDA_PATH = _build()
if FAKE_CUDA_PATH is not None:
    from emulator.testing import fake_cuda

    fake_cuda.bind(str(FAKE_CUDA_PATH))  # before the emulator dlopens libcuda.so.1
EMU = ctypes.CDLL(str(EMU_PATH), mode=ctypes.RTLD_GLOBAL)
EMU.dlaEmuLastViolation.restype = ctypes.c_char_p
EMU.dlaEmuSubmitCount.restype = ctypes.c_uint64
EMU.dlaEmuTasksRun.restype = ctypes.c_uint64
EMU.dlaEmuSubmitCalls.restype = ctypes.c_uint64
EMU.dlaEmuRegisterCalls.restype = ctypes.c_uint64


def _has_gpu() -> bool:
    try:
        from cuda.bindings import runtime

        err, n = runtime.cudaGetDeviceCount()
        return int(err) == 0 and n > 0
    except Exception:
        return False


HAS_GPU = (not FAKE) and _has_gpu()


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    for item in items:
        if "gpu_only" in item.keywords and not HAS_GPU:
            item.add_marker(pytest.mark.skip(reason="needs a real GPU (not the fake driver)"))
        if "emulated" in item.keywords and not (FAKE or HAS_GPU):
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU and not in fake-driver mode"))


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "gpu_only: needs a real GPU and CUDA driver")
    config.addinivalue_line("markers", "emulated: runs against the DLA emulator (GPU or fake driver)")


class Emu:
    """Debug queries of the emulator (not part of cuDLA)."""

    lib = EMU
    path = EMU_PATH
    fake = FAKE

    def live(self) -> tuple[int, int, int]:
        return (EMU.dlaEmuLiveDevices(), EMU.dlaEmuLiveModules(), EMU.dlaEmuLiveRegistrations())

    def violation(self) -> str:
        return (EMU.dlaEmuLastViolation() or b"").decode()

    def tasks_run(self) -> int:
        return int(EMU.dlaEmuTasksRun())

    def submit_calls(self) -> int:
        return int(EMU.dlaEmuSubmitCalls())

    def register_calls(self) -> int:
        return int(EMU.dlaEmuRegisterCalls())

    def tasks_submitted(self) -> int:
        return int(EMU.dlaEmuSubmitCount())


@pytest.fixture()
def emu() -> Iterator[Emu]:
    """The emulator; asserts after the test that nothing is left open (devices, modules, registrations)."""
    e = Emu()
    assert e.live() == (0, 0, 0), f"a previous test leaked emulator state: {e.live()}"
    yield e
    assert e.live() == (0, 0, 0), f"left open (devices, modules, registrations): {e.live()}"


@pytest.fixture(scope="session")
def cuda() -> Any:
    """The CUDA runtime helpers the backend uses (fake in fake-driver mode)."""
    if FAKE:
        from emulator.testing import fake_cuda

        return fake_cuda
    from dla_infer_node.backends import cuda_runtime

    cuda_runtime.make_context_current(0)
    return cuda_runtime


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dla-emu-artifacts")  # pytest keeps the last few runs' folders
