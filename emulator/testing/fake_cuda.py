"""TEST-ONLY stand-in for ``dla_infer_node.backends.cuda_runtime`` over emulator/testing/fake_libcuda.c.

With it, the real ``cuda.bindings.cudla`` binding, the DLA emulator and the backend run end to end on a
machine without a GPU. Every "async" call completes immediately, so stream-ordering bugs stay invisible
here; the GPU tests (test_gpu/) cover those.
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


def memcpy_htod_async(dst: int, src: int, size: int, stream: int, stage: str = "submit") -> None:
    _sticky("cudaMemcpyAsync", stage)
    ctypes.memmove(dst, src, size)


def memcpy_dtoh_async(dst: int, src: int, size: int, stream: int, stage: str = "submit") -> None:
    _sticky("cudaMemcpyAsync", stage)
    ctypes.memmove(dst, src, size)


def memset_async(ptr: int, value: int, size: int, stream: int, stage: str = "memory") -> None:
    ctypes.memset(ptr, value, size)


class PinnedBuffer:
    def __init__(self, size: int, what: str = "") -> None:
        self.size = size
        self._arr = np.zeros(size, np.uint8)
        self.array = self._arr
        self.ptr = int(self._arr.ctypes.data)

    def free(self) -> None:
        self.ptr = 0


class Stream:
    def __init__(self) -> None:
        self.handle = int(_LIB.fakeStream())

    def synchronize(self, stage: str = "execution") -> None:
        _sticky("cudaStreamSynchronize", stage)

    def is_capturing(self) -> bool:
        return False

    def destroy(self) -> None:
        self.handle = 0
