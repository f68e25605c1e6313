"""cuDLA backend, HYBRID mode, through ``cuda.bindings.cudla`` (cuda-bindings >= 13.3).

Start (construction = load), in this order; each step's failure is a stage error and undoes the steps
before it: loadable file checks -> libcudla probe (``get_version``) and DLA count -> CUDA context current
-> stream -> ``create_device(dla_core, Mode.CUDA_DLA)`` -> ``module_load_from_memory`` -> descriptors
checked against the artifact -> per buffer set (``frames_in_flight`` of them, two by default): one
``cudaMalloc`` per tensor sized from ``size_``, pinned host buffers for the outputs -> ``mem_register``
once per buffer -> per set a ``Task`` (its registered pointers, NULL events) and an event -> the input path
(CPU pack + async copy, or the fused GPU kernel).

Per frame, in two halves so that a second frame can be on its way while the DLA runs the first:
:meth:`CudlaBackend.submit` (the input path enqueues the frame into a free buffer set's input on the
stream -> ``submit_task`` of that set's task on the same stream -> async D2H copies into the set's pinned
buffers -> the set's event recorded) and :meth:`CudlaBackend.collect` (wait for that event -> unpack ->
:class:`RawOutputs`). :meth:`CudlaBackend.infer` is both at once. One stream keeps every frame's work in
submission order (hybrid mode runs the tasks of one stream in order), so the input copy of frame N+1 never
overtakes task N; the second set is for the host side: frame N's pinned outputs are still being decoded
while frame N+1's copies are queued, and neither task's buffers are written before its outputs are read.
A set is reused only after its frame was collected. No device or pinned memory is allocated per frame.

A CUDA error on the output copies or the sync is a DLA execution fault: ``get_last_error`` is read, both
codes are reported as an ``execution``-stage error, and the backend refuses further frames (CUDA calls the
process state inconsistent; the node exits non-zero and the launch file respawns it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from dla_infer_node.artifact.sidecar import (
    Artifact,
    check_loadable_file,
    default_sidecar,
    load_artifact,
    read_loadable,
)
from dla_infer_node.backends import cuda_runtime
from dla_infer_node.backends.cudla_errors import (
    LIBRARY_HINT,
    CudlaStageError,
    DeviceError,
    ExecutionError,
    RuntimeLibraryError,
    SubmitError,
    TensorError,
    cudla_call,
    status_name,
)
from dla_infer_node.backends.cudla_tensors import BoundTensor, bind_tensors, descriptor_dict
from dla_infer_node.backends.gpu_preprocess import GpuInputPath
from dla_infer_node.backends.input_path import INPUT_PATH_KINDS, CpuInputPath, InputPath
from dla_infer_node.core.backend import RawOutputs
from dla_infer_node.core.errors import BackendError, ModelError, ParameterError
from dla_infer_node.core.model_meta import ModelMetadata, load_metadata
from dla_infer_node.core.preprocess import Letterbox
from dla_infer_node.core.settings import validate_value
from dla_infer_node.core.tensor_format import unpack

LOG = logging.getLogger("dla_infer_node.cudla")
MAX_FRAME = (3840, 2160)  # largest frame the input path accepts (sizes the GPU path's staging buffer)


def make_input_path(kind: str, *construction: Any, cuda: Any = None) -> InputPath:
    """Build the input path named by ``preprocess_device`` ("cpu" or "gpu") from the construction
    arguments every path takes (``input_path``'s module docstring: input spec, layout, int8 scale, largest
    frame width and height).

    ``cuda`` (CPU path only) replaces :mod:`dla_infer_node.backends.cuda_runtime` in tests.
    """
    if kind == "cpu":
        return CpuInputPath(*construction, cuda=cuda)
    if kind == "gpu":
        path: InputPath = GpuInputPath(*construction)
        return path
    raise ParameterError("preprocess_device", kind, "one of " + ", ".join(INPUT_PATH_KINDS))


def import_cudla() -> ModuleType:
    try:
        from cuda.bindings import cudla
    except ImportError as exc:
        raise RuntimeLibraryError(f"cannot import cuda.bindings.cudla: {exc}",
                                  call="import cuda.bindings.cudla",
                                  hint="pip install 'cuda-bindings>=13.3' (cuda-python)") from exc
    return cudla


@dataclass
class BufferSet:
    """One frame's place on the DLA: its registered buffers' CUDA pointers, the pinned host copies of its
    outputs, its task and the event recorded after its output copies. The backend owns all of them (and
    releases them in :meth:`CudlaBackend.close`); a set only groups them."""

    index: int
    input_ptr: int
    output_ptrs: list[int]  # outputs in descriptor (index) order, as the task lists them
    pinned: list[Any]
    task: Any = None
    done: Any = None
    in_flight: Submitted | None = None


@dataclass(frozen=True)
class Submitted:
    """A frame submitted to the DLA; :meth:`CudlaBackend.collect` takes it, once."""

    buffers: BufferSet = field(repr=False)
    letterbox: Letterbox


class CudlaBackend:
    """One DLA core, one loadable, one CUDA stream; owns every handle it creates (see module docstring)."""

    name = "cudla"

    def __init__(
        self,
        artifact: Artifact,
        *,
        dla_core: int = 0,
        preprocess_device: str = "cpu",
        cuda_device: int = 0,
        max_frame: tuple[int, int] = MAX_FRAME,
        task_timeout_ms: int | None = None,
        frames_in_flight: int = 2,
        cudla_module: Any = None,
        cuda: Any = None,
        input_path_factory: Callable[..., InputPath] | None = None,
        observer: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.artifact = artifact
        self.metadata: ModelMetadata = artifact.metadata
        self.dla_core = int(dla_core)
        self.preprocess_device = preprocess_device
        self._cuda_device = int(cuda_device)
        self._max_frame = max_frame
        self._timeout = task_timeout_ms
        if int(frames_in_flight) < 1:
            raise ParameterError("frames_in_flight", frames_in_flight, "1 or more buffer sets")
        self.frames_in_flight = int(frames_in_flight)
        self._make_input = input_path_factory or make_input_path
        # called as each start stage passes (the doctor prints them); "descriptors" comes before the check
        self._observe = observer or (lambda stage, info: None)
        # resources, released by close() in reverse order; None/empty = not acquired
        self._stream: Any = None
        self._dev: int | None = None
        self._module: int | None = None
        self._dev_bufs: list[int] = []
        self._pinned: list[Any] = []
        self._registered: list[int] = []
        self._events: list[Any] = []
        self._sets: list[BufferSet] = []
        self._next_set = 0
        self._input: InputPath | None = None
        self.inputs: list[BoundTensor] = []
        self.outputs: list[BoundTensor] = []
        self.descriptors: dict[str, list[dict[str, Any]]] = {"inputs": [], "outputs": []}
        self.versions: dict[str, Any] = {}
        self.close_errors: list[BaseException] = []
        self._faulted: ExecutionError | None = None
        self._closed = False
        try:
            self._cudla = cudla_module if cudla_module is not None else import_cudla()
            self._cr = cuda if cuda is not None else cuda_runtime
            self._start()
        except BaseException:
            self.close()
            raise

    # ---- start -----------------------------------------------------------------------------------------
    def _start(self) -> None:
        cudla, cr, core = self._cudla, self._cr, self.dla_core
        blob = read_loadable(self.artifact)  # file checks before any byte reaches the driver
        version = cudla_call("runtime_library", "cudla.get_version", {}, cudla.get_version)
        count = cudla_call("device", "cudla.device_get_count", {}, cudla.device_get_count)
        self.versions = {"cudla": int(version), "dla_count": int(count)}
        self._observe("runtime_library", {"cudla_version": int(version)})
        if core >= int(count):
            raise DeviceError(f"dla_core {core} requested, the platform has {count} DLA core(s)",
                              call="cudla.device_get_count", params={"dla_core": core},
                              hint="AGX Orin has DLA 0 and 1; Orin NX one or two; Orin Nano none")
        self._observe("dla_count", {"dla_count": int(count), "dla_core": core})
        cr.make_context_current(self._cuda_device)  # hybrid mode binds the DLA handle to this context
        self._stream = cr.Stream()
        mode = cudla.Mode.CUDA_DLA
        self._dev = cudla_call("device", "cudla.create_device", {"dla_core": core, "mode": "Mode.CUDA_DLA"},
                               cudla.create_device, core, int(mode))
        if self._timeout is not None:
            cudla_call("device", "cudla.set_task_timeout_in_ms", {"timeout_ms": self._timeout},
                       cudla.set_task_timeout_in_ms, self._dev, int(self._timeout))
        self._observe("device", {"dla_core": core, "mode": "Mode.CUDA_DLA", "task_timeout_ms": self._timeout})
        self._module = cudla_call("loadable", "cudla.module_load_from_memory",
                                  {"loadable": str(self.artifact.loadable_path), "size": len(blob),
                                   "flags": 0},
                                  cudla.module_load_from_memory, self._dev, blob, len(blob), 0)
        self._observe("loadable", {"path": str(self.artifact.loadable_path), "bytes": len(blob)})
        self._bind_descriptors()
        self._observe("tensors", {"inputs": len(self.inputs), "outputs": len(self.outputs)})
        self._allocate_and_register()
        per_frame = sum(t.size for t in self.inputs + self.outputs)
        self._observe("memory", {"buffers": len(self._registered), "buffer_sets": self.frames_in_flight,
                                 "bytes": self.frames_in_flight * per_frame})
        n_in, per_set = len(self.inputs), len(self.inputs) + len(self.outputs)
        for k in range(self.frames_in_flight):
            ptrs, regs = (lst[k * per_set:(k + 1) * per_set] for lst in (self._dev_bufs, self._registered))
            task = cudla.Task()  # zero-filled: wait_events / signal_events stay NULL (hybrid mode)
            task.module_handle = self._module
            task.input_tensor = [regs[t.index] for t in self.inputs]
            task.output_tensor = regs[n_in:]
            self._events.append(cr.Event())
            self._sets.append(BufferSet(k, ptrs[self.inputs[0].index], ptrs[n_in:],
                                        self._pinned[k * len(self.outputs):(k + 1) * len(self.outputs)],
                                        task, self._events[-1]))
        inp = self.inputs[0]
        own_cpu_path = self.preprocess_device == "cpu" and self._make_input is make_input_path
        extra = {"cuda": self._cr} if own_cpu_path else {}
        self._input = self._make_input(self.preprocess_device, self.metadata.input, inp.layout, inp.scale,
                                       self._max_frame[0], self._max_frame[1], **extra)
        LOG.info("cuDLA backend ready: DLA %d, libcudla %s, %d input(s), %d output(s), input path %s",
                 core, version, len(self.inputs), len(self.outputs), self.preprocess_device)

    def _bind_descriptors(self) -> None:
        cudla, mod = self._cudla, self._module
        attr = cudla.ModuleAttributeType
        got: dict[str, list[Any]] = {}
        for side, num, descs in (("inputs", attr.NUM_INPUT_TENSORS, attr.INPUT_TENSOR_DESCRIPTORS),
                                 ("outputs", attr.NUM_OUTPUT_TENSORS, attr.OUTPUT_TENSOR_DESCRIPTORS)):
            n = cudla_call("tensors", "cudla.module_get_attributes", {"attr": num.name},
                           cudla.module_get_attributes, mod, int(num))
            lst = list(cudla_call("tensors", "cudla.module_get_attributes", {"attr": descs.name},
                                  cudla.module_get_attributes, mod, int(descs)))
            if len(lst) != int(n):
                raise TensorError(f"{side}: {n} tensors counted but {len(lst)} descriptors returned",
                                  call="cudla.module_get_attributes")
            got[side] = lst
        self.descriptors = {k: [descriptor_dict(d) for d in v] for k, v in got.items()}
        self._observe("descriptors", self.descriptors)
        self.inputs, self.outputs = bind_tensors(self.artifact, got["inputs"], got["outputs"])

    def _outputs_by_index(self) -> list[BoundTensor]:
        return sorted(self.outputs, key=lambda t: t.index)

    def _allocate_and_register(self) -> None:
        """Buffers set by set, each in descriptor order (inputs, then outputs); all zeroed once so pads are
        defined."""
        cr, cudla = self._cr, self._cudla
        tensors = (list(self.inputs) + self._outputs_by_index()) * self.frames_in_flight
        for t in tensors:
            self._dev_bufs.append(cr.malloc(t.size, what=t.name))
        for t in self._outputs_by_index() * self.frames_in_flight:
            self._pinned.append(cr.PinnedBuffer(t.size, what=t.name))
        for t, ptr in zip(tensors, self._dev_bufs, strict=True):
            cr.memset_async(ptr, 0, t.size, self._stream.handle)
        self._stream.synchronize(stage="memory")
        for t, ptr in zip(tensors, self._dev_bufs, strict=True):
            reg = cudla_call("memory", "cudla.mem_register",
                             {"tensor": t.name, "ptr": hex(ptr), "size": t.size, "flags": 0},
                             cudla.mem_register, self._dev, ptr, t.size, 0)
            self._registered.append(int(reg))

    # ---- per frame -------------------------------------------------------------------------------------
    def infer(self, image: np.ndarray, encoding: str) -> RawOutputs:
        return self.collect(self.submit(image, encoding))

    def _usable(self, call: str) -> None:
        if self._closed or self._input is None:
            raise BackendError("backend is closed", call=call, stage="backend")
        if self._faulted is not None:
            raise self._faulted

    def submit(self, image: np.ndarray, encoding: str) -> Submitted:
        """Enqueue the frame on a free buffer set and return at once (the DLA runs it after the frames
        submitted before it); :meth:`collect` waits for it."""
        self._usable("CudlaBackend.submit")
        n = len(self._sets)
        in_turn = [self._sets[(self._next_set + i) % n] for i in range(n)]
        bufs = next((b for b in in_turn if b.in_flight is None), None)
        if bufs is None:
            raise BackendError(f"all {n} buffer sets hold frames in flight: collect one before submitting",
                               call="CudlaBackend.submit", stage="backend")
        cudla, cr, stream = self._cudla, self._cr, self._stream.handle
        assert self._input is not None
        lb = self._input.enqueue(image, encoding, bufs.input_ptr, stream)
        params = {"dla_core": self.dla_core, "num_tasks": 1, "stream": hex(stream), "flags": 0,
                  "buffer_set": bufs.index}
        cudla_call("submit", "cudla.submit_task", params,
                   cudla.submit_task, self._dev, bufs.task.ptr, 1, stream, 0)
        try:
            for t, src, dst in zip(self._outputs_by_index(), bufs.output_ptrs, bufs.pinned, strict=True):
                cr.memcpy_dtoh_async(dst.ptr, src, t.size, stream, stage="execution")
            bufs.done.record(stream, stage="execution")
        except CudlaStageError as exc:
            raise self._fault_or(exc) from exc
        self._next_set = (bufs.index + 1) % n
        bufs.in_flight = ticket = Submitted(bufs, lb)
        return ticket

    def ready(self, ticket: Submitted) -> bool:
        """Whether :meth:`collect` would return without waiting (a failure says True: collect reports it)."""
        try:
            return bool(ticket.buffers.done.query(stage="execution"))
        except CudlaStageError:
            return True

    def collect(self, ticket: Submitted) -> RawOutputs:
        """Wait for a submitted frame's outputs and unpack them; its buffer set is free again after."""
        bufs = ticket.buffers
        if bufs.in_flight is not ticket:
            raise BackendError("this frame was collected already", call="CudlaBackend.collect",
                               stage="backend")
        self._usable("CudlaBackend.collect")
        try:
            bufs.done.synchronize(stage="execution")
        except CudlaStageError as exc:
            raise self._fault_or(exc) from exc
        pinned = {t.index: buf for t, buf in zip(self._outputs_by_index(), bufs.pinned, strict=True)}
        tensors = [unpack(pinned[t.index].array, t.layout, t.scale).reshape(t.shape) for t in self.outputs]
        bufs.in_flight = None  # unpack copied the outputs out: the set may take the next frame
        return RawOutputs(tensors=tensors, letterbox=ticket.letterbox)

    def _fault_or(self, exc: CudlaStageError) -> CudlaStageError:
        """A CUDA error on the copies or the wait after a submit is a DLA execution fault."""
        return exc if exc.cuda_error is None else self._execution_fault(exc)

    def dla_status(self) -> int:
        """``cudla.get_last_error`` of this handle: the status of the last task the DLA ran."""
        if self._dev is None:
            raise BackendError("backend is closed", call="cudla.get_last_error", stage="backend")
        return int(self._cudla.get_last_error(self._dev))

    def _execution_fault(self, exc: CudlaStageError) -> ExecutionError:
        dla = None
        try:
            dla = int(self._cudla.get_last_error(self._dev))
        except Exception as inner:  # the report must not hide the original fault
            LOG.error("cudla.get_last_error failed after an execution fault: %s", inner)
        cuda_name = self._cr.error_name(exc.cuda_error) if exc.cuda_error is not None else "?"
        err = ExecutionError(
            f"DLA task failed: CUDA reported {cuda_name} ({exc.cuda_error}) from {exc.call}; "
            f"cudla.get_last_error = cudla.Status.{status_name(dla)} ({dla})",
            call=exc.call, params=exc.params, status=dla, cuda_error=exc.cuda_error,
            hint="CUDA state is inconsistent after a DLA fault: the process must exit (the node exits "
                 "non-zero and its launch file respawns it)")
        self._faulted = err
        LOG.error("%s", err)
        return err

    # ---- teardown --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Synchronise, unregister, unload, destroy, free, destroy the stream. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        cudla = getattr(self, "_cudla", None)

        def step(what: str, fn: Callable[..., Any], *args: Any) -> None:
            try:
                fn(*args)
            except Exception as exc:  # keep going: every later resource still has to be released
                self.close_errors.append(exc)
                LOG.warning("cuDLA teardown: %s failed: %s", what, exc)

        if self._stream is not None:
            step("cudaStreamSynchronize", self._stream.synchronize, "execution")
        if self._input is not None:
            step("input path close", self._input.close)
            self._input = None
        self._sets = []
        for event in reversed(self._events):
            step("cudaEventDestroy", event.destroy)
        self._events = []
        for reg in reversed(self._registered):
            step("cudla.mem_unregister", cudla.mem_unregister, self._dev, reg)  # type: ignore[union-attr]
        self._registered = []
        if self._module is not None:
            step("cudla.module_unload", cudla.module_unload, self._module, 0)  # type: ignore[union-attr]
            self._module = None
        if self._dev is not None:
            step("cudla.destroy_device", cudla.destroy_device, self._dev)  # type: ignore[union-attr]
            self._dev = None
        for buf in reversed(self._pinned):
            step("cudaFreeHost", buf.free)
        self._pinned = []
        for ptr in reversed(self._dev_bufs):
            step("cudaFree", self._cr.free, ptr)
        self._dev_bufs = []
        if self._stream is not None:
            step("cudaStreamDestroy", self._stream.destroy)
            self._stream = None

    def __enter__(self) -> CudlaBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_same_model(meta: ModelMetadata, other: ModelMetadata) -> None:
    a = (meta.input.width, meta.input.height, meta.decoder.kind, tuple(meta.classes),
         tuple((o.name, o.shape) for o in meta.outputs))
    b = (other.input.width, other.input.height, other.decoder.kind, tuple(other.classes),
         tuple((o.name, o.shape) for o in other.outputs))
    if a != b:
        raise ModelError("metadata_path describes another model than the artifact sidecar",
                         call="open_cudla_backend",
                         params={"metadata": str(other.path), "artifact": str(meta.path)},
                         hint="leave metadata_path empty: the sidecar carries the model metadata")


def open_artifact(loadable_path: str, artifact_path: str = "") -> Artifact:
    """Sidecar (default ``<loadable>.yaml``) validated, loadable file checked; no device call."""
    sidecar = artifact_path or (str(default_sidecar(loadable_path)) if loadable_path else "")
    if not sidecar:
        raise ParameterError("artifact_path", "", "a sidecar YAML, or a loadable_path with <loadable>.yaml")
    artifact = load_artifact(sidecar, loadable_path or None)
    check_loadable_file(artifact.loadable_path)
    return artifact


def open_cudla_backend(settings: Any) -> tuple[CudlaBackend, ModelMetadata]:
    """Factory entry point (``BackendSettings``); rejects standalone runtime mode before any device call."""
    validate_value("runtime_mode", settings.runtime_mode)  # standalone: refused with the table's reason
    artifact = open_artifact(settings.loadable_path, settings.artifact_path)
    if settings.metadata_path:
        _check_same_model(artifact.metadata, load_metadata(settings.metadata_path))
    LOG.info("artifact: %s", artifact.summary())
    backend = CudlaBackend(artifact, dla_core=settings.dla_core, preprocess_device=settings.preprocess_device,
                           frames_in_flight=settings.frames_in_flight)
    return backend, artifact.metadata


__all__ = ["LIBRARY_HINT", "CudlaBackend", "SubmitError", "open_artifact",
           "open_cudla_backend"]
