"""The hybrid-mode contract, enforced by the DLA EMULATOR, seen through the REAL cuda.bindings.cudla:
every violation gives the documented (or, where cuDLA's reference is silent, the emulator's documented)
cudla.Status -- see emulator/README.md.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emulator import cases
from emulator.make_loadable import MAGIC

cudla = pytest.importorskip("cuda.bindings.cudla")
S = cudla.Status
pytestmark = pytest.mark.emulated
CUDA_DLA = int(cudla.Mode.CUDA_DLA)


def expect(status: Any, fn: Any, *args: Any) -> None:
    with pytest.raises(cudla.CudlaError) as ei:
        fn(*args)
    assert int(ei.value.status) == int(status), f"{S(ei.value.status).name} != {S(status).name}"


class Rig:
    """A device handle with the echo module loaded, two registered buffers, a task and a stream."""

    def __init__(self, cuda: Any, blob: bytes, size_in: int, size_out: int) -> None:
        self.cuda = cuda
        self.stream = cuda.Stream()
        self.dev = cudla.create_device(0, CUDA_DLA)
        self.mod: int | None = cudla.module_load_from_memory(self.dev, blob, len(blob), 0)
        self.ptrs = [cuda.malloc(size_in), cuda.malloc(size_out)]
        self.sizes = [size_in, size_out]
        self.regs = [cudla.mem_register(self.dev, p, n, 0)
                     for p, n in zip(self.ptrs, self.sizes, strict=True)]
        self.task = self.make_task([self.regs[0]], [self.regs[1]])
        self.extra_devs: list[int] = []

    def make_task(self, ins: list[int], outs: list[int], module: int | None = None) -> Any:
        t = cudla.Task()
        t.module_handle = self.mod if module is None else module
        t.input_tensor = ins
        t.output_tensor = outs
        return t

    def close(self) -> None:
        self.stream.synchronize()
        for r in self.regs:
            cudla.mem_unregister(self.dev, r)
        if self.mod is not None:
            cudla.module_unload(self.mod, 0)
        cudla.destroy_device(self.dev)
        for p in self.ptrs:
            self.cuda.free(p)
        self.stream.destroy()


@pytest.fixture()
def echo_blob(artifacts_dir: Path) -> tuple[bytes, int, int]:
    art = cases.echo_artifact(artifacts_dir / "contract", "linear", "fp16", "linear", "fp16")
    return art.loadable.read_bytes(), 0, 0  # buffer sizes are read back through the binding


@pytest.fixture()
def rig(emu: Any, cuda: Any, echo_blob: tuple[bytes, int, int]) -> Iterator[Rig]:
    blob = echo_blob[0]
    dev = cudla.create_device(0, CUDA_DLA)
    mod = cudla.module_load_from_memory(dev, blob, len(blob), 0)
    attr = cudla.ModuleAttributeType
    size_in = cudla.module_get_attributes(mod, int(attr.INPUT_TENSOR_DESCRIPTORS))[0].size_
    size_out = cudla.module_get_attributes(mod, int(attr.OUTPUT_TENSOR_DESCRIPTORS))[0].size_
    cudla.module_unload(mod, 0)
    cudla.destroy_device(dev)
    r = Rig(cuda, blob, int(size_in), int(size_out))
    yield r
    r.close()


def test_valid_task_runs_and_last_error_is_success(rig: Rig, emu: Any) -> None:
    before = emu.tasks_run()
    cudla.submit_task(rig.dev, rig.task.ptr, 1, rig.stream.handle, 0)
    rig.stream.synchronize()
    assert emu.tasks_run() == before + 1
    assert cudla.get_last_error(rig.dev) == 0


def test_descriptors_as_written(rig: Rig) -> None:
    (d,) = cudla.module_get_attributes(rig.mod, int(cudla.ModuleAttributeType.INPUT_TENSOR_DESCRIPTORS))
    assert (d.n, d.c, d.h, d.w, int(d.size_)) == (1, 3, cases.NET, cases.NET, rig.sizes[0])
    assert list(d.stride)[:4] == [2, 256, 256 * cases.NET, 256 * cases.NET * 3]
    assert cudla.module_get_attributes(rig.mod, int(cudla.ModuleAttributeType.NUM_OUTPUT_TENSORS)) == 1


def test_null_stream(rig: Rig, emu: Any) -> None:
    expect(S.ErrorInvalidParam, cudla.submit_task, rig.dev, rig.task.ptr, 1, 0, 0)
    assert "non-NULL CUDA stream" in emu.violation()


def test_events_must_be_null(rig: Rig) -> None:
    fences = (ctypes.c_uint64 * 4)()
    rig.task.wait_events = ctypes.addressof(fences)
    expect(S.ErrorInvalidParam, cudla.submit_task, rig.dev, rig.task.ptr, 1, rig.stream.handle, 0)
    rig.task.wait_events = 0
    rig.task.signal_events = ctypes.addressof(fences)
    expect(S.ErrorInvalidParam, cudla.submit_task, rig.dev, rig.task.ptr, 1, rig.stream.handle, 0)
    rig.task.signal_events = 0


def test_unregistered_pointer_in_task(rig: Rig) -> None:
    t = rig.make_task([rig.ptrs[0]], [rig.regs[1]])  # the CUDA pointer, not the registered one
    expect(S.ErrorInvalidAddress, cudla.submit_task, rig.dev, t.ptr, 1, rig.stream.handle, 0)


def test_pointer_registered_on_another_handle(rig: Rig, cuda: Any) -> None:
    dev2 = cudla.create_device(0, CUDA_DLA)
    p = cuda.malloc(rig.sizes[0])
    reg2 = cudla.mem_register(dev2, p, rig.sizes[0], 0)
    try:
        t = rig.make_task([reg2], [rig.regs[1]])
        expect(S.ErrorInvalidAddress, cudla.submit_task, rig.dev, t.ptr, 1, rig.stream.handle, 0)
    finally:
        cudla.mem_unregister(dev2, reg2)
        cudla.destroy_device(dev2)
        cuda.free(p)


def test_register_rules(rig: Rig, cuda: Any, emu: Any) -> None:
    expect(S.ErrorInvalidAddress, cudla.mem_register, rig.dev, rig.ptrs[0] + 16, 64, 0)
    assert "32-byte aligned" in emu.violation()
    expect(S.ErrorMemoryRegistered, cudla.mem_register, rig.dev, rig.ptrs[0], rig.sizes[0], 0)
    host = np.zeros(4096 + 64, np.uint8)
    addr = (host.ctypes.data + 63) // 64 * 64
    expect(S.ErrorInvalidAddress, cudla.mem_register, rig.dev, addr, 4096, 0)  # not CUDA device memory
    expect(S.ErrorInvalidAddress, cudla.mem_register, rig.dev, rig.ptrs[1], rig.sizes[1] * 4, 0)  # overrun
    expect(S.ErrorInvalidAddress, cudla.mem_unregister, rig.dev, 0x12340000)


def test_registered_size_must_cover_descriptor(rig: Rig, cuda: Any) -> None:
    p = cuda.malloc(rig.sizes[0])
    small = cudla.mem_register(rig.dev, p, 1024, 0)
    try:
        t = rig.make_task([small], [rig.regs[1]])
        expect(S.ErrorInvalidParam, cudla.submit_task, rig.dev, t.ptr, 1, rig.stream.handle, 0)
    finally:
        cudla.mem_unregister(rig.dev, small)
        cuda.free(p)


def test_tensor_counts_of_the_module(rig: Rig) -> None:
    t = rig.make_task([], [rig.regs[1]])
    expect(S.ErrorInvalidParam, cudla.submit_task, rig.dev, t.ptr, 1, rig.stream.handle, 0)
    t = rig.make_task([rig.regs[0]], [rig.regs[1], rig.regs[1]])
    expect(S.ErrorInvalidParam, cudla.submit_task, rig.dev, t.ptr, 1, rig.stream.handle, 0)


def test_one_module_per_handle_and_foreign_module(rig: Rig, echo_blob: tuple[bytes, int, int]) -> None:
    blob = echo_blob[0]
    expect(S.ErrorUnsupportedOperation, cudla.module_load_from_memory, rig.dev, blob, len(blob), 0)
    dev2 = cudla.create_device(0, CUDA_DLA)
    mod2 = cudla.module_load_from_memory(dev2, blob, len(blob), 0)
    try:
        t = rig.make_task([rig.regs[0]], [rig.regs[1]], module=mod2)
        expect(S.ErrorInvalidModule, cudla.submit_task, rig.dev, t.ptr, 1, rig.stream.handle, 0)
    finally:
        cudla.module_unload(mod2, 0)
        cudla.destroy_device(dev2)


def test_no_submit_while_capturing(rig: Rig, emu: Any) -> None:
    if emu.fake:
        from emulator.testing import fake_cuda

        fake_cuda._LIB.fakeSetCapturing(1)
        try:
            expect(S.ErrorUnsupportedOperation, cudla.submit_task, rig.dev, rig.task.ptr, 1,
                   rig.stream.handle, 0)
        finally:
            fake_cuda._LIB.fakeSetCapturing(0)
        return
    from cuda.bindings import runtime as rt

    mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
    (err,) = rt.cudaStreamBeginCapture(rig.stream.handle, mode)
    assert int(err) == 0
    try:
        expect(S.ErrorUnsupportedOperation, cudla.submit_task, rig.dev, rig.task.ptr, 1,
               rig.stream.handle, 0)
        assert "captured" in emu.violation()
    finally:
        err, graph = rt.cudaStreamEndCapture(rig.stream.handle)
        assert int(err) == 0
        if int(graph):
            rt.cudaGraphDestroy(graph)


def test_teardown_order_enforced(rig: Rig) -> None:
    expect(S.ErrorUnsupportedOperation, cudla.destroy_device, rig.dev)  # memory still registered
    for r in rig.regs:
        cudla.mem_unregister(rig.dev, r)
    rig.regs = []
    expect(S.ErrorUnsupportedOperation, cudla.destroy_device, rig.dev)  # module still loaded


def test_device_creation_rules(emu: Any) -> None:
    with pytest.raises(cudla.CudlaError) as ei:  # the binding refuses before reaching C
        cudla.create_device(0, int(cudla.Mode.STANDALONE))
    assert int(ei.value.status) == int(S.ErrorUnsupportedOperation)
    expect(S.ErrorInvalidDevice, cudla.create_device, 5, CUDA_DLA)
    devs = [cudla.create_device(1, CUDA_DLA) for _ in range(16)]
    try:
        expect(S.ErrorOutOfResources, cudla.create_device, 1, CUDA_DLA)
        d0 = cudla.create_device(0, CUDA_DLA)  # the limit is per DLA core
        cudla.destroy_device(d0)
    finally:
        for d in devs:
            cudla.destroy_device(d)
    assert cudla.device_get_count() == 2


def test_timeout_and_bad_loadables(emu: Any) -> None:
    dev = cudla.create_device(0, CUDA_DLA)
    try:
        expect(S.ErrorInvalidParam, cudla.set_task_timeout_in_ms, dev, 0)
        expect(S.ErrorInvalidParam, cudla.set_task_timeout_in_ms, dev, 1000001)
        cudla.set_task_timeout_in_ms(dev, 5000)
        engine = b"ftrt" + bytes(200)  # what a TensorRT plan looks like to cuDLA: not a loadable
        expect(S.ErrorUmd, cudla.module_load_from_memory, dev, engine, len(engine), 0)
        future = MAGIC + (2).to_bytes(4, "little") + bytes(24)
        expect(S.ErrorIncompatibleDlaSWVersion, cudla.module_load_from_memory, dev, future, len(future), 0)
    finally:
        cudla.destroy_device(dev)


@pytest.mark.gpu_only
def test_create_needs_current_cuda_context(emu: Any, cuda: Any) -> None:
    result: dict[str, Any] = {}

    def worker() -> None:  # a new thread has no current CUDA context
        try:
            result["dev"] = cudla.create_device(0, CUDA_DLA)
        except cudla.CudlaError as exc:
            result["status"] = int(exc.status)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if "dev" in result:
        cudla.destroy_device(result["dev"])
    assert result.get("status") == int(S.ErrorCuda)


def test_no_unload_while_task_running(rig: Rig, monkeypatch: Any) -> None:
    monkeypatch.setenv("DLA_EMU_DELAY_MS", "300")
    cudla.submit_task(rig.dev, rig.task.ptr, 1, rig.stream.handle, 0)
    expect(S.ErrorUnsupportedOperation, cudla.module_unload, rig.mod, 0)
    expect(S.ErrorUnsupportedOperation, cudla.mem_unregister, rig.dev, rig.regs[0])
    rig.stream.synchronize()
