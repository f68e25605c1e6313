"""Thin, checked helpers over ``cuda.bindings.runtime`` for the cuDLA backend.

Every helper raises a :class:`~dla_infer_node.backends.cudla_errors.CudlaStageError` naming the call,
its parameters and the ``cudaError_t`` name; ``stage`` says which part of the backend was running.
``cuda.bindings`` is imported on first use so that the package imports without it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

import numpy as np

from dla_infer_node.backends.cudla_errors import (
    STAGE_CLASSES,
    CudlaStageError,
    RuntimeLibraryError,
)

CUDA_ERROR_EXTERNAL_DEVICE = 911  # cudaErrorExternalDevice: a DLA fault seen from the CUDA side
CUDA_ERROR_NOT_READY = 600  # cudaErrorNotReady: what cudaEventQuery answers for work still running


def _rt() -> Any:
    try:
        from cuda.bindings import runtime
    except ImportError as exc:
        raise RuntimeLibraryError(f"cannot import cuda.bindings.runtime: {exc}", call="import",
                                  hint="pip install 'cuda-bindings>=13.3'") from exc
    return runtime


def error_name(code: int) -> str:
    try:
        return str(_rt().cudaError_t(int(code)).name)
    except Exception:
        return f"cudaError({int(code)})"


class CudaCallError(CudlaStageError):
    """A CUDA runtime call failed; ``cuda_error`` is the numeric cudaError_t."""


def check(result: Any, call: str, params: Mapping[str, Any], stage: str) -> Any:
    """Unpack a ``(err, *values)`` tuple from cuda.bindings, raising the stage's error on failure."""
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    code = int(err)
    if code != 0:
        name = error_name(code)
        base = STAGE_CLASSES[stage]
        exc_type = type(f"Cuda{base.__name__}", (CudaCallError, base), {})
        exc = exc_type(f"failed with {name} ({code})", call=call, params=params, cuda_error=code)
        exc.stage = stage
        raise exc
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def make_context_current(device: int = 0) -> None:
    """Make the device's primary CUDA context current on this thread (hybrid mode binds to it)."""
    rt = _rt()
    check(rt.cudaSetDevice(int(device)), "cudaSetDevice", {"device": device}, "device")
    check(rt.cudaFree(0), "cudaFree", {"ptr": 0, "why": "initialise the primary context"}, "device")


def versions() -> dict[str, int]:
    rt = _rt()
    drv = check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion", {}, "device")
    run = check(rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion", {}, "device")
    return {"driver": int(drv), "runtime": int(run)}


def device_count() -> int:
    return int(check(_rt().cudaGetDeviceCount(), "cudaGetDeviceCount", {}, "device"))


def malloc(size: int, what: str = "") -> int:
    ptr = check(_rt().cudaMalloc(int(size)), "cudaMalloc", {"size": size, "what": what}, "memory")
    return int(ptr)


def free(ptr: int) -> None:
    check(_rt().cudaFree(int(ptr)), "cudaFree", {"ptr": hex(ptr)}, "memory")


def mem_get_info() -> tuple[int, int]:
    free_b, total = check(_rt().cudaMemGetInfo(), "cudaMemGetInfo", {}, "memory")
    return int(free_b), int(total)


def memcpy_htod_async(dst: int, src: int, size: int, stream: int, stage: str = "submit") -> None:
    rt = _rt()
    check(rt.cudaMemcpyAsync(int(dst), int(src), int(size), rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                             int(stream)),
          "cudaMemcpyAsync", {"dst": hex(dst), "size": size, "kind": "H2D", "stream": hex(stream)}, stage)


def memcpy_dtoh_async(dst: int, src: int, size: int, stream: int, stage: str = "submit") -> None:
    rt = _rt()
    check(rt.cudaMemcpyAsync(int(dst), int(src), int(size), rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                             int(stream)),
          "cudaMemcpyAsync", {"src": hex(src), "size": size, "kind": "D2H", "stream": hex(stream)}, stage)


def memset_async(ptr: int, value: int, size: int, stream: int, stage: str = "memory") -> None:
    check(_rt().cudaMemsetAsync(int(ptr), int(value), int(size), int(stream)),
          "cudaMemsetAsync", {"ptr": hex(ptr), "size": size, "stream": hex(stream)}, stage)


class PinnedBuffer:
    """Page-locked host memory (cudaMallocHost) with a uint8 numpy view; freed once."""

    def __init__(self, size: int, what: str = "") -> None:
        self.size = int(size)
        self.what = what
        ptr = check(_rt().cudaMallocHost(self.size), "cudaMallocHost", {"size": size, "what": what}, "memory")
        self.ptr: int = int(ptr)
        raw = (ctypes.c_uint8 * self.size).from_address(self.ptr)
        self.array: np.ndarray = np.ctypeslib.as_array(raw)

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self.array = np.empty(0, dtype=np.uint8)  # drop the view before the memory goes
            check(_rt().cudaFreeHost(ptr), "cudaFreeHost", {"ptr": hex(ptr), "what": self.what}, "memory")


class Event:
    """A CUDA event made with ``cudaEventBlockingSync``: a host thread waiting for it sleeps instead of
    spinning on a CPU core (see :class:`Stream`). ``record`` marks the end of what is enqueued on a stream
    so far; ``query`` says (without waiting) whether that work is done, ``synchronize`` waits for it."""

    def __init__(self) -> None:
        rt = _rt()
        flags = rt.cudaEventBlockingSync | rt.cudaEventDisableTiming
        self._event: Any = check(rt.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags",
                                 {"flags": "cudaEventBlockingSync | cudaEventDisableTiming"}, "device")

    def record(self, stream: int, stage: str = "submit") -> None:
        check(_rt().cudaEventRecord(self._event, int(stream)), "cudaEventRecord",
              {"stream": hex(int(stream))}, stage)

    def query(self, stage: str = "execution") -> bool:
        result = _rt().cudaEventQuery(self._event)
        code = int(result[0] if isinstance(result, tuple) else result)
        if code == CUDA_ERROR_NOT_READY:
            return False
        check(result, "cudaEventQuery", {}, stage)
        return True

    def synchronize(self, stage: str = "execution") -> None:
        check(_rt().cudaEventSynchronize(self._event), "cudaEventSynchronize", {}, stage)

    def destroy(self) -> None:
        """Idempotent."""
        event, self._event = self._event, None
        if event is not None:
            check(_rt().cudaEventDestroy(event), "cudaEventDestroy", {}, "device")


class Stream:
    """A non-blocking CUDA stream owned by one backend, with the event it waits on.

    ``synchronize`` waits on a blocking-sync event recorded at the end of the stream, not on the stream
    itself: under CUDA's default scheduling a host thread waiting for a stream spins on a CPU core while
    there are fewer contexts than cores (a Jetson's case), i.e. for the whole of every DLA task. A
    blocking-sync event puts the thread to sleep until the work is done."""

    def __init__(self) -> None:
        rt = _rt()
        s = check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
                  {"flags": "cudaStreamNonBlocking"}, "device")
        self._obj = s
        self.handle: int = int(s)
        self._done: Event | None = None
        try:
            self._done = Event()
        except BaseException:
            self.destroy()
            raise

    def synchronize(self, stage: str = "execution") -> None:
        assert self._done is not None
        self._done.record(self.handle, stage)
        self._done.synchronize(stage)

    def is_capturing(self) -> bool:
        rt = _rt()
        status = check(rt.cudaStreamIsCapturing(self.handle), "cudaStreamIsCapturing",
                       {"stream": hex(self.handle)}, "submit")
        return bool(int(status) != int(rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusNone))

    def destroy(self) -> None:
        """Event, then stream. Idempotent."""
        done, self._done = getattr(self, "_done", None), None
        if done is not None:
            done.destroy()
        if self.handle:
            h, self.handle = self.handle, 0
            check(_rt().cudaStreamDestroy(h), "cudaStreamDestroy", {"stream": hex(h)}, "device")
