"""What the DLA EMULATOR costs the host is told apart from the caller's own work: the CUDA driver's
host-function thread that runs its task functions is named (``dla-emu-host``, what the node benchmark
leaves out of the node's CPU), the caller's threads keep their names, the task programs' CPU is split by
where it ran, and the host scratch the tasks are copied through is page-locked and freed at unload.

Runs on the GPU and under the fake driver (CPU CI, through test/emulator/test_cudla_fake_driver.py): both
run host functions on threads of their own (the fake one per stream); the fake runs them inline on the
caller's thread for a stream it did not make, which the inline case uses.
"""

from __future__ import annotations

import ctypes
import os
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.backends.cudla import CudlaBackend
from dla_infer_node.bench import cpu_probe
from dla_infer_node.bench.node_roles import EMULATOR_THREADS
from emulator import cases

pytestmark = pytest.mark.emulated


def _comm(tid: int) -> str:
    with open(f"/proc/self/task/{tid}/comm") as fh:
        return fh.read().strip()


def _names() -> dict[int, str]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = _comm(int(tid))
        except OSError:  # ended meanwhile
            continue
    return out


def _counter(emu: Any, name: str) -> int:
    fn = getattr(emu.lib, name)
    fn.restype = ctypes.c_uint64
    return int(fn())


def _fake_lib() -> Any:
    from emulator.testing import fake_cuda

    return fake_cuda._LIB


class _ForeignStream:
    """A stream handle the fake driver did not make: it runs that stream's work at once, on the caller's
    thread (host functions inline)."""

    _token = ctypes.c_uint64(0)

    def __init__(self) -> None:
        self.handle = ctypes.addressof(self._token)

    def synchronize(self, stage: str = "execution") -> None:
        return None

    def is_capturing(self) -> bool:
        return False

    def destroy(self) -> None:
        self.handle = 0


def _run(cuda: Any, artifacts_dir: Path, frames: int = 3) -> tuple[dict[int, str], dict[str, Any]]:
    """Frames through a backend; the process's thread names and a CPU sample (benchmark's sampler, the
    emulator's threads excluded) taken before the backend closes (the fake driver's stream threads end
    with their streams)."""
    art = cases.oracle_artifact(artifacts_dir, "linear", "fp16", "linear", "fp16")
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        for i in range(frames):
            be.infer(cases.make_frame(i + 1).image, "rgb8")
        sample = cpu_probe.CpuSampler(lambda: 0, excluded_threads=EMULATOR_THREADS).sample()
        return _names(), sample


def test_the_drivers_host_function_thread_is_named_and_left_out(emu: Any, cuda: Any,
                                                                artifacts_dir: Path) -> None:
    name_fn = emu.lib.dlaEmuHostThreadName
    name_fn.restype = ctypes.c_char_p
    assert (name_fn() or b"").decode() == EMULATOR_THREADS[0]  # the name the benchmark leaves out
    me = threading.get_native_id()
    my_name = _comm(me)
    inline0, total0 = _counter(emu, "dlaEmuInlineHostCpuNs"), _counter(emu, "dlaEmuHostCpuNs")
    names, sample = _run(cuda, artifacts_dir)
    host = [tid for tid, name in names.items() if name == EMULATOR_THREADS[0]]
    assert host and me not in host, names
    assert names[me] == my_name  # the submitting thread keeps its own name
    # the programs ran on the driver's thread: none of their CPU is the submitting thread's
    assert _counter(emu, "dlaEmuInlineHostCpuNs") == inline0
    assert _counter(emu, "dlaEmuHostCpuNs") > total0
    # the benchmark's sampler reports that thread apart and counts none of it as the process's own
    assert EMULATOR_THREADS[0] in sample["excluded_threads"]
    assert EMULATOR_THREADS[0] not in sample["threads"]


def test_inline_host_functions_leave_the_callers_name_and_count_as_inline(emu: Any, cuda: Any,
                                                                           artifacts_dir: Path) -> None:
    if not emu.fake:
        pytest.skip("the real driver runs host functions on its own thread")
    me = threading.get_native_id()
    my_name = _comm(me)
    inline0, total0 = _counter(emu, "dlaEmuInlineHostCpuNs"), _counter(emu, "dlaEmuHostCpuNs")
    _run(types.SimpleNamespace(**{**vars(cuda), "Stream": _ForeignStream}), artifacts_dir)
    assert _comm(me) == my_name
    inline = _counter(emu, "dlaEmuInlineHostCpuNs") - inline0
    assert inline > 0 and inline == _counter(emu, "dlaEmuHostCpuNs") - total0


def test_task_scratch_is_page_locked_and_freed_at_unload(emu: Any, cuda: Any, artifacts_dir: Path) -> None:
    if not emu.fake:
        pytest.skip("counted by the fake driver (its cuMemAllocHost / cuMemFreeHost)")
    live = _fake_lib().fakeLiveHostAllocs
    before = int(live())
    art = cases.oracle_artifact(artifacts_dir, "linear", "fp16", "linear", "fp16")
    be = CudlaBackend(load_artifact(art.sidecar), cuda=cuda)
    try:
        be.infer(cases.make_frame(1).image, "rgb8")
        # one page-locked block per tensor (the driver's DMA copies them, no CPU staging)
        assert int(live()) - before == len(be.inputs) + len(be.outputs)
    finally:
        be.close()
    assert int(live()) == before
