"""TEST-ONLY stand-in for ``dla_infer_node.backends.cuda_runtime`` over emulator/testing/fake_libcuda.c.

With it, the real ``cuda.bindings.cudla`` binding, the DLA emulator and the backend run end to end on a
machine without a GPU. Streams are asynchronous as on a GPU (the fake driver runs each stream's work on a
thread of its own, in order): copies, the emulator's tasks and events complete later than the call that
enqueued them, so a missing wait shows as wrong bytes here too. What stays invisible is device memory
itself (it is host memory) and the GPU input path (no kernels); the GPU tests (test_gpu/) cover those.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from dla_infer_node.backends import cuda_runtime as real

CudaCallError = real.CudaCallError
error_name = real.error_name
_LIB: Any = None


def bind(lib_path: str) -> None:
    """Load the fake libcuda.so.1 (before the emulator dlopens it) and use it."""
    global _LIB
    _LIB = ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL)
    _LIB.fakeMalloc.restype = ctypes.c_void_p
    _LIB.fakeMalloc.argtypes = [ctypes.c_size_t]
    _LIB.fakeFree.argtypes = [ctypes.c_void_p]
    _LIB.fakeStream.restype = ctypes.c_void_p
    for name in ("fakeStreamSynchronize", "fakeStreamDestroy"):
        getattr(_LIB, name).argtypes = [ctypes.c_void_p]
    _LIB.fakeEventRecord.restype = ctypes.c_uint64
    _LIB.fakeEventRecord.argtypes = [ctypes.c_void_p]
    _LIB.fakeEventQuery.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    _LIB.fakeEventSynchronize.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    _LIB.fakeMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    _LIB.fakeMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]


def _sticky(call: str, stage: str) -> None:
    if _LIB.fakeStickyError():
        real.check((719,), call, {"fake": True}, stage)  # cudaErrorLaunchFailure, as after a trap


def make_context_current(device: int = 0) -> None:
    return None


def versions() -> dict[str, int]:
    return {"driver": 13000, "runtime": 13000}


def device_count() -> int:
    return 1


def malloc(size: int, what: str = "") -> int:
    return int(_LIB.fakeMalloc(size))


def free(ptr: int) -> None:
    _LIB.fakeFree(ptr)


def mem_get_info() -> tuple[int, int]:
    return (1 << 30, 1 << 31)


def _copy(dst: int, src: int, size: int, stream: int, stage: str = "submit") -> None:
    _sticky("cudaMemcpyAsync", stage)
    _LIB.fakeMemcpyAsync(dst, src, size, stream)


memcpy_htod_async = memcpy_dtoh_async = _copy


def memset_async(ptr: int, value: int, size: int, stream: int, stage: str = "memory") -> None:
    _LIB.fakeMemsetAsync(ptr, value, size, stream)


class PinnedBuffer:
    def __init__(self, size: int, what: str = "") -> None:
        self.size = size
        self._arr = np.zeros(size, np.uint8)
        self.array = self._arr
        self.ptr = int(self._arr.ctypes.data)

    def free(self) -> None:
        self.ptr = 0


class Event:
    """A position in one stream's queue (see fake_libcuda.c)."""

    def __init__(self) -> None:
        self._stream, self._mark = 0, 0

    def record(self, stream: int, stage: str = "submit") -> None:
        self._stream, self._mark = int(stream), int(_LIB.fakeEventRecord(stream))

    def query(self, stage: str = "execution") -> bool:
        _sticky("cudaEventQuery", stage)
        return bool(_LIB.fakeEventQuery(self._stream, self._mark))

    def synchronize(self, stage: str = "execution") -> None:
        _LIB.fakeEventSynchronize(self._stream, self._mark)
        _sticky("cudaEventSynchronize", stage)

    def destroy(self) -> None:
        self._stream = 0


class Stream:
    def __init__(self) -> None:
        self.handle = int(_LIB.fakeStream())

    def synchronize(self, stage: str = "execution") -> None:
        _LIB.fakeStreamSynchronize(self.handle)
        _sticky("cudaStreamSynchronize", stage)

    def is_capturing(self) -> bool:
        return False

    def destroy(self) -> None:
        """Runs what is still queued, then ends the stream's thread. Idempotent."""
        if self.handle:
            h, self.handle = self.handle, 0
            _LIB.fakeStreamDestroy(h)
