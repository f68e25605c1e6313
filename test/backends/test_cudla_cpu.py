"""cuDLA backend logic on the CPU, with stand-ins for cuda.bindings.cudla and the CUDA runtime helpers:
buffer sizing from descriptors, task building, output order, two frames in flight on separate buffer
sets, error mapping to stages, teardown order after a failure at every stage, execution faults, and the
real binding's "library not found".
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dla_infer_node.artifact.sidecar import parse_artifact
from dla_infer_node.backends import cudla_errors as ce
from dla_infer_node.backends.cudla import CudlaBackend, open_cudla_backend
from dla_infer_node.core.errors import BackendError, ModelError, ParameterError
from dla_infer_node.core.settings import STANDALONE_EXPLANATION
from dla_infer_node.core.tensor_format import pack
from dla_infer_node.core.tensor_layout import TensorLayout

NET = 32
OUTS = (("p3", 4), ("p4", 2))  # name, grid


def model() -> dict[str, Any]:
    return {"name": "m", "classes": ["a"], "input": {"name": "images", "width": NET, "height": NET},
            "decoder": {"kind": "yolov5_raw", "num_classes": 1, "strides": [8, 16],
                        "anchors": [[10, 13], [30, 61]]},
            "outputs": [{"name": n, "shape": [1, 6, g, g]} for n, g in OUTS]}


def artifact(tmp: Path, in_dtype: str = "int8") -> Any:
    (tmp / "m.loadable").write_bytes(b"LOADABLE")
    doc = {"tensors": {"inputs": [{"name": "images", "format": "hwc4", "dtype": in_dtype,
                                   "shape": [1, 3, NET, NET], "scale": 1 / 127}],
                       "outputs": [{"name": n, "format": "chw16", "dtype": "fp16", "shape": [1, 6, g, g]}
                                   for n, g in OUTS]},
           "model": model(), "loadable": "m.loadable"}
    return parse_artifact(doc, tmp / "m.loadable.yaml")


class Desc:
    """Stand-in for cudla.ModuleTensorDescriptor."""

    def __init__(self, name: str, layout: TensorLayout, extra: int = 0, c: int | None = None) -> None:
        self.name, self.size_ = name, layout.size + extra
        self.n, self.c, self.h, self.w = layout.n, c or layout.c, layout.h, layout.w
        self.data_format = self.data_type = self.data_category = self.pixel_format = self.pixel_mapping = 0
        self.stride = [*layout.strides, 0, 0, 0, 0]


class CudlaError(Exception):  # the binding's class name, which cudla_errors recognises
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


TASKS: dict[int, FakeTask] = {}  # the stand-in's "task pointers"


class FakeTask:
    def __init__(self) -> None:
        self.module_handle = 0
        self.input_tensor: list[int] = []
        self.output_tensor: list[int] = []
        self.wait_events = 0
        self.signal_events = 0
        self.ptr = id(self)
        TASKS[self.ptr] = self


class FakeCudla:
    Mode = enum.IntEnum("Mode", {"CUDA_DLA": 0, "STANDALONE": 1})
    ModuleAttributeType = enum.IntEnum("ModuleAttributeType", {
        "NUM_INPUT_TENSORS": 0, "NUM_OUTPUT_TENSORS": 1, "INPUT_TENSOR_DESCRIPTORS": 2,
        "OUTPUT_TENSOR_DESCRIPTORS": 3})
    CudlaError = CudlaError
    Task = FakeTask

    def __init__(self, log: list[str], ins: list[Desc], outs: list[Desc], fail: str | None = None,
                 status: int = 7) -> None:
        self.log, self.ins, self.outs, self.fail, self.status = log, ins, outs, fail, status
        self.registered: dict[int, int] = {}
        self.submitted: list[FakeTask] = []
        self.last_error = 0
        self.run: Any = None  # a "DLA program": run(task) when a task is submitted

    def _do(self, name: str) -> None:
        self.log.append(name)
        if self.fail == name:
            raise CudlaError(self.status)

    def get_version(self) -> int:
        self._do("get_version")
        return 1005000

    def device_get_count(self) -> int:
        self._do("device_get_count")
        return 2

    def create_device(self, core: int, mode: int) -> int:
        assert mode == 0
        self._do("create_device")
        return 0xD0

    def module_load_from_memory(self, dev: int, blob: bytes, size: int, flags: int) -> int:
        assert blob == b"LOADABLE" and size == len(blob)
        self._do("module_load")
        return 0xA0

    def module_get_attributes(self, mod: int, attr: int) -> Any:
        self._do("module_get_attributes")
        return {0: len(self.ins), 1: len(self.outs), 2: self.ins, 3: self.outs}[attr]

    def mem_register(self, dev: int, ptr: int, size: int, flags: int) -> int:
        self._do("mem_register")
        reg = 0x7000_0000 + ptr
        self.registered[reg] = size
        return reg

    def submit_task(self, dev: int, task_ptr: int, n: int, stream: int, flags: int) -> None:
        self._do("submit_task")
        self.submitted.append(TASKS[task_ptr])
        if self.run is not None:
            self.run(TASKS[task_ptr])

    def mem_unregister(self, dev: int, reg: int) -> None:
        self.log.append(f"mem_unregister:{reg:#x}")
        del self.registered[reg]

    def module_unload(self, mod: int, flags: int) -> None:
        self.log.append("module_unload")

    def destroy_device(self, dev: int) -> None:
        self.log.append("destroy_device")

    def get_last_error(self, dev: int) -> int:
        return self.last_error


class FakeCuda:
    """Stand-in for dla_infer_node.backends.cuda_runtime: host 'device' memory, synchronous copies."""

    def __init__(self, log: list[str], fail: str | None = None) -> None:
        self.log, self.fail = log, fail
        self.mem: dict[int, np.ndarray] = {}
        self.next = 0x1000
        self.sync_error: int | None = None
        cuda = self

        class PinnedBuffer:
            def __init__(self, size: int, what: str = "") -> None:
                cuda._do("cudaMallocHost")
                self.array = np.zeros(size, np.uint8)
                self.ptr = cuda._alloc(size, self.array)

            def free(self) -> None:
                cuda.log.append("cudaFreeHost")

        class Event:
            def __init__(self) -> None:
                cuda._do("cudaEventCreate")

            def record(self, stream: int, stage: str = "submit") -> None:
                cuda.log.append("event_record")

            def query(self, stage: str = "execution") -> bool:
                return True

            def synchronize(self, stage: str = "execution") -> None:
                cuda.log.append(f"event_sync:{stage}")
                if cuda.sync_error is not None and stage == "execution":  # the DLA task's, not the staging's
                    from dla_infer_node.backends.cuda_runtime import check

                    check((cuda.sync_error,), "cudaEventSynchronize", {}, stage)

            def destroy(self) -> None:
                cuda.log.append("cudaEventDestroy")

        class Stream:
            handle = 0x5

            def __init__(self) -> None:
                cuda._do("cudaStreamCreate")

            def synchronize(self, stage: str = "execution") -> None:
                cuda.log.append("sync")
                if cuda.sync_error is not None:
                    from dla_infer_node.backends.cuda_runtime import check

                    check((cuda.sync_error,), "cudaStreamSynchronize", {}, stage)

            def destroy(self) -> None:
                cuda.log.append("cudaStreamDestroy")

        self.PinnedBuffer, self.Stream, self.Event = PinnedBuffer, Stream, Event

    def _do(self, name: str) -> None:
        self.log.append(name)
        if self.fail == name:
            from dla_infer_node.backends.cuda_runtime import check

            check((2,), name, {}, "memory")  # cudaErrorMemoryAllocation

    def _alloc(self, size: int, arr: np.ndarray | None = None) -> int:
        ptr = self.next
        self.next += (size + 255) // 256 * 256 + 256
        self.mem[ptr] = arr if arr is not None else np.zeros(size, np.uint8)
        return ptr

    def make_context_current(self, device: int = 0) -> None:
        self.log.append("context")

    def malloc(self, size: int, what: str = "") -> int:
        self._do("cudaMalloc")
        self.log.append(f"malloc:{size}")
        return self._alloc(size)

    def free(self, ptr: int) -> None:
        self.log.append("cudaFree")

    def memset_async(self, ptr: int, value: int, size: int, stream: int, stage: str = "memory") -> None:
        self.mem[ptr][:size] = value

    def memcpy_htod_async(self, dst: int, src: int, size: int, stream: int, stage: str = "submit") -> None:
        self.mem[dst][:size] = self.mem[src][:size]

    def memcpy_dtoh_async(self, dst: int, src: int, size: int, stream: int, stage: str = "submit") -> None:
        self.mem[dst][:size] = self.mem[src][:size]

    def error_name(self, code: int) -> str:
        return {911: "cudaErrorExternalDevice"}.get(code, f"cudaError({code})")


def layouts() -> tuple[TensorLayout, list[TensorLayout]]:
    inp = TensorLayout.dense("hwc4", "int8", 1, 3, NET, NET)
    outs = [TensorLayout.dense("chw16", "fp16", 1, 6, g, g) for _, g in OUTS]
    return inp, outs


def rig(tmp: Path, fail: str | None = None, cuda_fail: str | None = None, reverse_outputs: bool = False,
        ) -> tuple[list[str], FakeCudla, FakeCuda, Any]:
    log: list[str] = []
    inp, outs = layouts()
    in_descs = [Desc("images", inp, extra=64, c=4)]  # hwc4 input reported with C = 4, slack at the end
    out_descs = [Desc(n, lay, c=16) for (n, _), lay in zip(OUTS, outs, strict=True)]
    if reverse_outputs:
        out_descs.reverse()
    return log, FakeCudla(log, in_descs, out_descs, fail), FakeCuda(log, cuda_fail), artifact(tmp)


def test_buffers_sized_from_descriptors_and_task(tmp_path: Path) -> None:
    log, cudla, cuda, art = rig(tmp_path, reverse_outputs=True)
    be = CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    inp, outs = layouts()
    # per buffer set (two: one frame on the DLA, the next one on its way) one device buffer per tensor, in
    # descriptor order (input, then p4, p3), sized from size_
    assert [e for e in log if e.startswith("malloc:")] == [
        f"malloc:{inp.size + 64}", f"malloc:{outs[1].size}", f"malloc:{outs[0].size}"] * 2
    assert sorted(cudla.registered.values()) == sorted([inp.size + 64, outs[0].size, outs[1].size] * 2)
    assert be.frames_in_flight == 2 and len(be._sets) == 2
    for k, bufs in enumerate(be._sets):
        task = bufs.task
        assert task.module_handle == 0xA0 and task.wait_events == 0 and task.signal_events == 0
        assert task.input_tensor == [be._registered[3 * k]]
        assert task.output_tensor == be._registered[3 * k + 1:3 * k + 3]  # registered, descriptor order
        assert all(r in cudla.registered for r in task.input_tensor + task.output_tensor)
    first, second = (set(b.task.input_tensor + b.task.output_tensor) for b in be._sets)
    assert not first & second  # no buffer shared between the sets
    be.close()


def test_outputs_in_metadata_order_and_unpacked(tmp_path: Path) -> None:
    log, cudla, cuda, art = rig(tmp_path, reverse_outputs=True)
    be = CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    # "run the DLA": fill the output device buffers (descriptor order p4, p3) with known tensors
    values = {"p3": 1.5, "p4": -2.0}
    for pos, t in enumerate(be._outputs_by_index()):
        cuda.mem[be._dev_bufs[1 + pos]][:] = pack(np.full(t.layout.shape, values[t.name], np.float32),
                                                  t.layout)[: t.size]
    raw = be.infer(np.zeros((24, 40, 3), np.uint8), "rgb8")
    assert [t.shape for t in raw.tensors] == [(1, 6, 4, 4), (1, 6, 2, 2)]
    assert raw.tensors[0].max() == 1.5 and raw.tensors[1].min() == -2.0
    # one stream sync at start (zeroing); per frame the staging's event, then the frame's own event
    assert log.count("sync") == 1
    assert [e for e in log if e.startswith("event_sync")] == ["event_sync:submit", "event_sync:execution"]
    assert raw.letterbox.src_w == 40
    be.close()


def dla_writes_input_level(cudla: FakeCudla, cuda: FakeCuda, be: CudlaBackend) -> None:
    """The stand-in DLA "runs" a task at submit: every output element = the task's first input byte (the
    int8 of a uniform frame's level), written into the task's own output buffers."""
    reg_to_ptr = dict(zip(be._registered, be._dev_bufs, strict=True))

    def run(task: FakeTask) -> None:
        level = float(cuda.mem[reg_to_ptr[task.input_tensor[0]]].view(np.int8)[0])
        for reg, t in zip(task.output_tensor, be._outputs_by_index(), strict=True):
            cuda.mem[reg_to_ptr[reg]][:t.size] = pack(np.full(t.layout.shape, level, np.float32), t.layout)

    cudla.run = run


def test_two_frames_in_flight_each_gets_its_own_outputs(tmp_path: Path) -> None:
    """Frame A is submitted, then frame B before A is collected: A's outputs are still A's (B went to the
    other buffer set, its copies did not overwrite A's pinned outputs). A third submit before a collect is
    refused, a frame is collected once, and the sets alternate."""
    _, cudla, cuda, art = rig(tmp_path)
    be = CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    dla_writes_input_level(cudla, cuda, be)
    white, black = (np.full((NET, NET, 3), v, np.uint8) for v in (255, 0))  # int8 input levels 127, 0
    a = be.submit(white, "rgb8")
    b = be.submit(black, "rgb8")
    assert a.buffers is not b.buffers
    assert [t.input_tensor for t in cudla.submitted] == [be._sets[0].task.input_tensor,
                                                         be._sets[1].task.input_tensor]
    with pytest.raises(BackendError, match="collect one"):
        be.submit(white, "rgb8")
    assert be.ready(a) and all(np.all(t == 127.0) for t in be.collect(a).tensors)
    with pytest.raises(BackendError, match="collected already"):
        be.collect(a)
    c = be.submit(white, "rgb8")
    assert c.buffers is a.buffers  # the freed set takes the next frame
    assert all(np.all(t == 0.0) for t in be.collect(b).tensors)
    assert all(np.all(t == 127.0) for t in be.collect(c).tensors)
    be.close()


def test_one_buffer_set_takes_one_frame_at_a_time(tmp_path: Path) -> None:
    _, cudla, cuda, art = rig(tmp_path)
    be = CudlaBackend(art, cudla_module=cudla, cuda=cuda, frames_in_flight=1)
    assert len(be._registered) == 3 and be.frames_in_flight == 1
    a = be.submit(np.zeros((8, 8, 3), np.uint8), "rgb8")
    with pytest.raises(BackendError, match="collect one"):
        be.submit(np.zeros((8, 8, 3), np.uint8), "rgb8")
    be.collect(a)
    be.infer(np.zeros((8, 8, 3), np.uint8), "rgb8")
    be.close()
    with pytest.raises(ParameterError, match="frames_in_flight"):
        CudlaBackend(art, cudla_module=cudla, cuda=cuda, frames_in_flight=0)


@pytest.mark.parametrize(("fail", "stage"), [
    ("get_version", "runtime_library"), ("device_get_count", "device"), ("create_device", "device"),
    ("module_load", "loadable"), ("module_get_attributes", "tensors"), ("mem_register", "memory"),
])
def test_error_mapping_names_stage_call_and_status(tmp_path: Path, fail: str, stage: str) -> None:
    _, cudla, cuda, art = rig(tmp_path, fail=fail)
    with pytest.raises(ce.CudlaStageError) as ei:
        CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    e = ei.value
    assert e.stage == stage and e.status == 7 and e.call and e.call.startswith("cudla.")
    assert "cudla.Status." in str(e)


def test_submit_error_and_driver_not_found(tmp_path: Path) -> None:
    _, cudla, cuda, art = rig(tmp_path)
    be = CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    cudla.fail = "submit_task"
    with pytest.raises(ce.SubmitError) as ei:
        be.infer(np.zeros((8, 8, 3), np.uint8), "rgb8")
    assert "cudla.submit_task" in str(ei.value) and "stream" in ei.value.params
    be.close()
    _, cudla, cuda, art = rig(tmp_path, fail="create_device")
    cudla.status = 15  # ErrorDriverNotFound: the runtime library stage, whatever call saw it
    with pytest.raises(ce.RuntimeLibraryError):
        CudlaBackend(art, cudla_module=cudla, cuda=cuda)


RELEASES = ("sync", "cudaEventDestroy", "mem_unregister", "module_unload", "destroy_device", "cudaFreeHost",
            "cudaFree", "cudaStreamDestroy")


def releases(log: list[str]) -> list[str]:
    return [e.split(":")[0] for e in log if e.split(":")[0] in RELEASES]


@pytest.mark.parametrize(("fail", "cuda_fail", "expected"), [
    ("get_version", None, []),
    ("create_device", None, ["sync", "cudaStreamDestroy"]),
    ("module_load", None, ["sync", "destroy_device", "cudaStreamDestroy"]),
    ("module_get_attributes", None, ["sync", "module_unload", "destroy_device", "cudaStreamDestroy"]),
    (None, "cudaMallocHost", ["sync", "module_unload", "destroy_device", *["cudaFree"] * 6,
                              "cudaStreamDestroy"]),
    ("mem_register", None, ["sync", "module_unload", "destroy_device", *["cudaFreeHost"] * 4,
                            *["cudaFree"] * 6, "cudaStreamDestroy"]),
    (None, "cudaEventCreate", ["sync", *["mem_unregister"] * 6, "module_unload", "destroy_device",
                               *["cudaFreeHost"] * 4, *["cudaFree"] * 6, "cudaStreamDestroy"]),
])
def test_teardown_after_failure_at_each_stage(tmp_path: Path, fail: str | None, cuda_fail: str | None,
                                              expected: list[str]) -> None:
    log, cudla, cuda, art = rig(tmp_path, fail=fail, cuda_fail=cuda_fail)
    with pytest.raises(ce.CudlaStageError):
        CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    start = max(i for i, e in enumerate(log) if e in (fail, cuda_fail)) + 1
    assert releases(log[start:]) == expected
    assert cudla.registered == {}


def test_close_order_and_idempotent(tmp_path: Path) -> None:
    log, cudla, cuda, art = rig(tmp_path)
    be = CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    regs = list(be._registered)
    n = len(log)
    be.close()
    tail = log[n:]
    # sync, the input path (its event and pinned staging buffer), the sets' events, then the DLA side, then
    # memory (two buffer sets), then the stream
    assert releases(tail) == (["sync", "cudaEventDestroy", "cudaFreeHost"] + ["cudaEventDestroy"] * 2
                              + ["mem_unregister"] * 6 + ["module_unload", "destroy_device"]
                              + ["cudaFreeHost"] * 4 + ["cudaFree"] * 6 + ["cudaStreamDestroy"])
    unregs = [e for e in tail if e.startswith("mem_unregister")]
    assert unregs == [f"mem_unregister:{r:#x}" for r in reversed(regs)]
    be.close()
    assert len(log) == n + len(tail)
    with pytest.raises(Exception, match="closed"):
        be.infer(np.zeros((8, 8, 3), np.uint8), "rgb8")


def test_execution_fault_reports_both_codes_and_is_sticky(tmp_path: Path) -> None:
    log, cudla, cuda, art = rig(tmp_path)
    be = CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    cuda.sync_error, cudla.last_error = 911, 0x40000006
    with pytest.raises(ce.ExecutionError) as ei:
        be.infer(np.zeros((8, 8, 3), np.uint8), "rgb8")
    e = ei.value
    assert e.stage == "execution" and e.cuda_error == 911 and e.status == 0x40000006
    assert "cudaErrorExternalDevice (911)" in str(e) and "get_last_error" in str(e)
    with pytest.raises(ce.ExecutionError):
        be.infer(np.zeros((8, 8, 3), np.uint8), "rgb8")
    be.close()  # still releases the DLA side
    assert cudla.registered == {} and "destroy_device" in log


def test_descriptor_mismatch_is_tensor_stage(tmp_path: Path) -> None:
    log, cudla, cuda, art = rig(tmp_path)
    cudla.outs = cudla.outs[:1]
    with pytest.raises(ce.TensorError, match="1 outputs, the artifact declares 2"):
        CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    log, cudla, cuda, art = rig(tmp_path)
    cudla.ins[0].h = 16
    with pytest.raises(ce.TensorError, match="n,c,h,w"):
        CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    log, cudla, cuda, art = rig(tmp_path)
    cudla.outs[0].stride[0] = 2  # linear's atom, but the artifact says chw16
    with pytest.raises(ce.TensorError, match="chw16"):
        CudlaBackend(art, cudla_module=cudla, cuda=cuda)
    assert "destroy_device" in log and cudla.registered == {}


def test_missing_int8_scale_is_startup_error(tmp_path: Path) -> None:
    (tmp_path / "m.loadable").write_bytes(b"x")
    inp = {"name": "images", "format": "hwc4", "dtype": "int8", "shape": [1, 3, NET, NET]}
    doc = {"tensors": {"inputs": [inp],
                       "outputs": [{"name": n, "format": "chw16", "dtype": "fp16", "shape": [1, 6, g, g]}
                                   for n, g in OUTS]}, "model": model(), "loadable": "m.loadable"}
    with pytest.raises(ModelError, match="scale"):
        parse_artifact(doc, tmp_path / "m.loadable.yaml")


def test_standalone_rejected_before_any_device_call(tmp_path: Path) -> None:
    from dla_infer_node.backends.factory import BackendSettings

    s = BackendSettings(backend="cudla", loadable_path=str(tmp_path / "does-not-exist"),
                        runtime_mode="standalone")
    with pytest.raises(ParameterError) as ei:
        open_cudla_backend(s)
    assert "--buildDLAStandalone" in str(ei.value) and "hybrid" in str(ei.value)
    assert "--buildDLAStandalone" in STANDALONE_EXPLANATION


def test_library_not_found_is_runtime_library_stage(tmp_path: Path) -> None:
    """The real binding (when installed) on a machine without libcudla.so.1: runtime_library stage."""
    try:
        import ctypes

        ctypes.CDLL("libcudla.so.1")
        pytest.skip("a libcudla.so.1 is loadable here (Jetson or emulator)")
    except OSError:
        pass
    cuda = FakeCuda([])
    with pytest.raises(ce.RuntimeLibraryError) as ei:
        CudlaBackend(artifact(tmp_path), cuda=cuda)  # real cuda.bindings.cudla, or its ImportError
    assert ei.value.stage == "runtime_library" and ei.value.hint


@pytest.mark.parametrize("encoding", ["yuyv", "nv12", "bayer_rggb8", "mono16"])
def test_cpu_input_path_fills_a_camera_frame_as_its_rgb8_twin(encoding: str) -> None:
    """preprocess_device: cpu takes every camera encoding: a YUYV, NV12, Bayer or 16-bit frame fills the DLA
    input buffer with the bytes of its cv_bridge rgb8 conversion, at the largest size the path takes (an
    NV12 frame has 3/2 as many rows as its height: the size check goes by the picture, not the rows)."""
    from dla_infer_node.backends.input_path import CpuInputPath
    from dla_infer_node.core.color_convert import to_rgb8
    from dla_infer_node.core.model_meta import InputSpec
    from dla_infer_node.core.synth_frames import frame_in

    spec = InputSpec(name="images", width=NET, height=NET, channel_order="rgb", mean=(0.0, 0.0, 0.0),
                     std=(255.0, 255.0, 255.0), pad_value=114)
    layout = TensorLayout.dense("hwc4", "int8", 1, 3, NET, NET)
    rgb = np.random.default_rng(1).integers(0, 256, (96, 96, 3), dtype=np.uint8)  # 3x: the gathered way
    frame = frame_in(rgb, encoding, pad=4)
    filled = []
    for image, enc in ((frame, encoding), (to_rgb8(frame, encoding), "rgb8")):
        cuda = FakeCuda([])
        path = CpuInputPath(spec, layout, 0.05, 96, 96, cuda=cuda)
        dst = cuda.malloc(layout.size)
        path.enqueue(image, enc, dst, 0)
        filled.append(cuda.mem[dst][:layout.size].copy())
        path.close()
    assert np.array_equal(filled[0], filled[1])


def test_frames_in_flight_setting_and_detector(tmp_path: Path) -> None:
    """The node's frames_in_flight (1 or 2) reaches the backend's buffer sets and the Detector's depth; a
    third is refused by the settings row; the onnxruntime backend is one frame at a time."""
    from dla_infer_node.backends.factory import BackendSettings
    from dla_infer_node.core.pipeline import Detector

    _, cudla, cuda, art = rig(tmp_path)
    for n in (1, 2):
        be = CudlaBackend(art, cudla_module=cudla, cuda=cuda, frames_in_flight=n)
        assert Detector(be, art.metadata).frames_in_flight == n == len(be._sets)
        be.close()
    with pytest.raises(ParameterError, match=r"frames_in_flight.*\[1, 2\]"):
        BackendSettings(backend="cudla", loadable_path=str(art.loadable_path), frames_in_flight=3).validate()
