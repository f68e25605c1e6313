"""What the DLA EMULATOR costs the host is told apart from the caller's own work: the CUDA driver's
host-function thread that runs its task functions is named (``dla-emu-host``, what the node benchmark
leaves out of the node's CPU), the caller's threads keep their names, the task programs' CPU is split by
where it ran, and the host scratch the tasks are copied through is page-locked and freed at unload.

Runs on the GPU (the real driver runs host functions on a thread of its own) and under the fake driver
(CPU CI, through test/emulator/test_cudla_fake_driver.py), which runs them inline unless asked to use a
thread of its own as the real driver does.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
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


@pytest.fixture()
def driver_thread(emu: Any) -> Iterator[None]:
    """Host functions on a thread of the driver's own: the real driver's way, the fake's on request."""
    if emu.fake:
        _fake_lib().fakeHostFuncThread(1)
    try:
        yield
    finally:
        if emu.fake:
            _fake_lib().fakeHostFuncThread(0)


def _run(cuda: Any, artifacts_dir: Path, frames: int = 3) -> None:
    art = cases.oracle_artifact(artifacts_dir, "linear", "fp16", "linear", "fp16")
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        for i in range(frames):
            be.infer(cases.make_frame(i + 1).image, "rgb8")


def test_the_drivers_host_function_thread_is_named_and_left_out(emu: Any, cuda: Any, artifacts_dir: Path,
                                                                driver_thread: None) -> None:
    name_fn = emu.lib.dlaEmuHostThreadName
    name_fn.restype = ctypes.c_char_p
    assert (name_fn() or b"").decode() == EMULATOR_THREADS[0]  # the name the benchmark leaves out
    me = threading.get_native_id()
    my_name = _comm(me)
    inline0, total0 = _counter(emu, "dlaEmuInlineHostCpuNs"), _counter(emu, "dlaEmuHostCpuNs")
    _run(cuda, artifacts_dir)
    names = _names()
    host = [tid for tid, name in names.items() if name == EMULATOR_THREADS[0]]
    assert host and me not in host, names
    assert names[me] == my_name  # the submitting thread keeps its own name
    # the programs ran on the driver's thread: none of their CPU is the submitting thread's
    assert _counter(emu, "dlaEmuInlineHostCpuNs") == inline0
    assert _counter(emu, "dlaEmuHostCpuNs") > total0
    # the benchmark's sampler reports that thread apart and counts none of it as the process's own
    sampler = cpu_probe.CpuSampler(lambda: 0, excluded_threads=EMULATOR_THREADS)
    sample = sampler.sample()
    assert EMULATOR_THREADS[0] in sample["excluded_threads"]
    assert EMULATOR_THREADS[0] not in sample["threads"]


def test_inline_host_functions_leave_the_callers_name_and_count_as_inline(emu: Any, cuda: Any,
                                                                           artifacts_dir: Path) -> None:
    if not emu.fake:
        pytest.skip("the real driver runs host functions on its own thread")
    me = threading.get_native_id()
    my_name = _comm(me)
    inline0, total0 = _counter(emu, "dlaEmuInlineHostCpuNs"), _counter(emu, "dlaEmuHostCpuNs")
    _run(cuda, artifacts_dir)
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
