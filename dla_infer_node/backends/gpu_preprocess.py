"""GPU input path of the cuDLA backend: one fused kernel from the raw frame into the DLA input buffer.

Per frame (all on the backend's stream, no host synchronisation with it): copy the frame's bytes as they
came (any encoding of ``gpu_preprocess_params.SOURCE_FORMATS``: RGB/BGR(A)/mono in 8 or 16 bit, YUYV/UYVY,
NV12/NV21, Bayer in 8 or 16 bit) into a pinned staging buffer (this is where any row ``step`` is absorbed),
one async upload into device staging, one kernel launch that converts each source pixel it reads to RGB
(as cv_bridge / OpenCV would), letterboxes, resizes (OpenCV's 8-bit INTER_LINEAR, bit-exact), reorders
channels, normalises, converts to fp16/int8 and writes every byte of the destination in the descriptor's
layout. No RGB frame is ever made: the conversion happens per tap inside the one kernel.
The arithmetic and why it matches the CPU path exactly: :mod:`dla_infer_node.backends.preprocess_kernel`;
the parameter block and the checks made before any CUDA call: ``gpu_preprocess_params``.

The kernel is compiled once per process and GPU architecture with NVRTC through ``cuda.core`` (cached in
memory; on disk too when ``DLA_INFER_KERNEL_CACHE`` names a folder). Each :class:`GpuInputPath` owns its
module (loaded from the cached cubin), its pinned and device staging and two events, and releases them
in reverse order in :meth:`GpuInputPath.close`.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dla_infer_node.backends import cuda_runtime as cr
from dla_infer_node.backends import preprocess_kernel as pk
from dla_infer_node.backends.gpu_preprocess_params import (
    STAGE,
    GpuPreprocessError,
    check_frame,
    check_layout,
    frame_size,
    set_geometry,
    source_format,
    source_tables,
    static_params,
)
from dla_infer_node.backends.input_path import SizedInputPath
from dla_infer_node.core.errors import InputError, ParameterError
from dla_infer_node.core.preprocess import Letterbox

if TYPE_CHECKING:
    from dla_infer_node.backends.cuda_runtime import PinnedBuffer

TABLE_ALIGN = 256
_CUBIN_CACHE: dict[tuple[str, str], bytes] = {}


def compile_kernel(arch: str, variant: tuple[int, int]) -> bytes:
    """The cubin of one kernel variant ``(element bytes, channels per atom)`` for ``arch`` (e.g. ``sm_87``).

    The variant's chunk size (``preprocess_kernel.CHUNK_BYTES``) is compiled in as well.

    NVRTC via cuda.core, once per process (and per source hash, so an edited kernel never hits a stale
    entry of the optional disk cache).
    """
    es, cpg = variant
    cb = pk.CHUNK_BYTES[variant]
    key = (pk.SOURCE_SHA256, f"{arch}_e{es}v{cpg}c{cb}")
    if key in _CUBIN_CACHE:
        return _CUBIN_CACHE[key]
    cache_dir = os.environ.get("DLA_INFER_KERNEL_CACHE")
    path = Path(cache_dir) / f"preprocess_{pk.SOURCE_SHA256[:16]}_{key[1]}.cubin" if cache_dir else None
    if path is not None and path.is_file():
        _CUBIN_CACHE[key] = path.read_bytes()
        return _CUBIN_CACHE[key]
    try:
        try:
            from cuda.core import Program, ProgramOptions
        except ImportError:  # cuda.core < 0.4 kept everything under .experimental
            from cuda.core.experimental import Program, ProgramOptions
    except ImportError as exc:
        raise GpuPreprocessError(f"cannot import cuda.core: {exc}", call="import cuda.core",
                                 hint="pip install cuda-core (with cuda-bindings >= 13.3)") from exc
    try:
        program = Program(pk.KERNEL_SOURCE, code_type="c++",
                          options=ProgramOptions(arch=arch, name="dla_preprocess",
                                                 define_macro=[("DLA_ES", str(es)), ("DLA_CPG", str(cpg)),
                                                               ("DLA_CB", str(cb))]))
        code = bytes(program.compile("cubin").code)
    except Exception as exc:  # NVRTC errors carry the compiler log in their message
        raise GpuPreprocessError(f"NVRTC compile failed: {exc}", call="Program.compile",
                                 params={"arch": arch, "variant": variant,
                                         "source_sha256": pk.SOURCE_SHA256[:16]}) from exc
    _CUBIN_CACHE[key] = code
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(code)
            tmp.replace(path)
        except OSError:
            pass  # the disk cache is an optimisation only
    return code


def _check(result: Any, call: str, params: Mapping[str, Any] | None = None) -> Any:
    """``(status, *values)`` from cuda.bindings (driver or runtime) -> values, or GpuPreprocessError."""
    status, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(status) != 0:
        name = getattr(status, "name", str(int(status)))
        raise GpuPreprocessError(f"failed with {name} ({int(status)})", call=call, params=params)
    return values[0] if len(values) == 1 else (values or None)


def _cuda_core_device(device_id: int) -> str:
    """Make the device's primary context current (cuda.core) and return its ``sm_XY`` architecture."""
    try:
        try:
            from cuda.core import Device
        except ImportError:
            from cuda.core.experimental import Device
        dev = Device(device_id)
        dev.set_current()
        cc = dev.compute_capability
    except Exception as exc:
        raise GpuPreprocessError(f"no usable CUDA device: {type(exc).__name__}: {exc}",
                                 call="cuda.core.Device.set_current", params={"device": device_id}) from exc
    return f"sm_{cc[0]}{cc[1]}"


class GpuInputPath(SizedInputPath):
    """:class:`~dla_infer_node.backends.input_path.InputPath` running the fused preprocessing kernel.

    ``device_id`` (keyword) names the CUDA device whose primary context runs the kernel.
    """

    def _setup(self, int8_scale: float | None, *, device_id: int = 0) -> None:
        input_spec, layout, max_width, max_height = self._spec, self._layout, self._max_w, self._max_h
        check_layout(input_spec, layout, int8_scale)
        if int(max_width) < 1 or int(max_height) < 1:
            raise ParameterError("max_width/max_height", (max_width, max_height), "positive integers")
        self._max_w, self._max_h = int(max_width), int(max_height)
        self.variant = (layout.elem_size, layout.vector)
        self._ytab_off = input_spec.width * 16
        self._table_bytes = -(-(input_spec.width + input_spec.height) * 16 // TABLE_ALIGN) * TABLE_ALIGN
        self.staging_bytes = self._table_bytes + self._max_w * self._max_h * 8  # 8: rgba16/bgra16
        self._params = static_params(input_spec, layout, int8_scale)
        self.grid, self.block = pk.launch_geometry(self._params.work, pk.CHUNK_BYTES[self.variant])
        self._argv = (ctypes.c_void_p * 1)(ctypes.addressof(self._params))
        self._geometry: tuple[int, int, str, bool] | None = None
        self._lb: Letterbox | None = None
        self._closed = False
        self._module: Any = None
        self._function: Any = None  # the kernel of the last frame's source family
        self._functions: dict[str, Any] = {}
        self._pinned: PinnedBuffer | None = None
        self._dev = 0
        self._upload_done: Any = None
        self._kernel_done: Any = None
        try:
            self._open(device_id)
        except BaseException:
            self.close()
            raise

    # -- startup ---------------------------------------------------------------------------------------
    def _open(self, device_id: int) -> None:
        try:
            from cuda.bindings import driver, runtime
        except ImportError as exc:
            raise GpuPreprocessError(f"cannot import cuda.bindings: {exc}", call="import cuda.bindings",
                                     hint="pip install 'cuda-bindings>=13.3' cuda-core") from exc
        self._drv, self._rt = driver, runtime
        arch = _cuda_core_device(device_id)
        cubin = compile_kernel(arch, self.variant)
        self._module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData",
                              {"arch": arch, "bytes": len(cubin)})
        for family, name in pk.KERNEL_NAMES.items():
            self._functions[family] = _check(driver.cuModuleGetFunction(self._module, name.encode()),
                                             "cuModuleGetFunction", {"name": name})
        self._function = self._functions["packed8"]
        self._pinned = cr.PinnedBuffer(self.staging_bytes, what="gpu preprocess staging")
        self._dev = cr.malloc(self.staging_bytes, what="gpu preprocess staging")
        flags = runtime.cudaEventDisableTiming
        self._upload_done = _check(runtime.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags")
        self._kernel_done = _check(runtime.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags")
        p = self._params
        p.xtab, p.ytab, p.src = self._dev, self._dev + self._ytab_off, self._dev + self._table_bytes

    # -- per frame -------------------------------------------------------------------------------------
    def _prepare(self, w: int, h: int, encoding: str, big_endian: bool) -> tuple[Letterbox, bool]:
        """Letterbox and kernel parameters for this geometry; True when the tap tables must be uploaded."""
        if self._geometry == (w, h, encoding, big_endian) and self._lb is not None:
            return self._lb, False
        fmt = source_format(encoding)
        lb = Letterbox.fit(w, h, self._spec.width, self._spec.height)
        unit, row, _ = source_tables(fmt, w)
        xtab, ytab = pk.tap_tables(w, h, unit, lb.new_w, lb.new_h, row_bytes=row)
        assert self._pinned is not None
        table = self._pinned.array
        table[: xtab.nbytes] = xtab.reshape(-1).view(np.uint8)
        table[self._ytab_off: self._ytab_off + ytab.nbytes] = ytab.reshape(-1).view(np.uint8)
        set_geometry(self._params, self._spec, lb, encoding, big_endian)
        self._function = self._functions[fmt.family]
        return lb, True

    def enqueue(self, image: np.ndarray, encoding: str, dst_ptr: int, stream: int) -> Letterbox:
        """Upload the frame and launch the kernel on ``stream``; returns at once (no host sync).

        ``image`` is the array :func:`~dla_infer_node.backends.gpu_preprocess_params.check_frame` takes
        for ``encoding`` (``cv2.cvtColor``'s input; 16-bit frames carry their byte order in the dtype).
        """
        if self._closed:
            raise InputError("GPU input path is closed", call="GpuInputPath.enqueue", stage=STAGE)
        img = check_frame(image, encoding, self._max_w, self._max_h)
        dst, s = int(dst_ptr), int(stream)
        if dst == 0 or dst % pk.STRIDE_ALIGN:
            raise GpuPreprocessError("destination must be a non-null, 16-byte aligned device pointer",
                                     call="GpuInputPath.enqueue", params={"dst_ptr": hex(dst)})
        w, h = frame_size(img, encoding)
        big_endian = not img.dtype.isnative
        rt, pinned = self._rt, self._pinned
        assert pinned is not None
        # The pinned staging may still be the source of the previous upload (a no-op wait in the backend,
        # which synchronises every frame).
        _check(rt.cudaEventSynchronize(self._upload_done), "cudaEventSynchronize", {"event": "upload"})
        lb, new_tables = self._prepare(w, h, encoding, big_endian)
        tb, nbytes = self._table_bytes, img.size * img.itemsize
        # the bytes as they came (dtype kept, so a big-endian frame stays big-endian); absorbs any row step
        np.copyto(pinned.array[tb: tb + nbytes].view(img.dtype).reshape(img.shape), img)
        start = 0 if new_tables else tb
        # Device staging is read by the previous kernel, possibly on another stream: order after it.
        _check(rt.cudaStreamWaitEvent(s, self._kernel_done, 0), "cudaStreamWaitEvent", {"stream": hex(s)})
        _check(rt.cudaMemcpyAsync(self._dev + start, pinned.ptr + start, tb + nbytes - start,
                                  rt.cudaMemcpyKind.cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync", {"kind": "H2D", "bytes": tb + nbytes - start, "stream": hex(s)})
        _check(rt.cudaEventRecord(self._upload_done, s), "cudaEventRecord", {"event": "upload"})
        self._geometry, self._lb = (w, h, encoding, big_endian), lb
        self.launch(dst, s)
        return lb

    def launch(self, dst_ptr: int, stream: int, src_ptr: int | None = None) -> None:
        """Run the kernel alone on the staged frame (``src_ptr`` overrides the staging: benchmarks only)."""
        if self._closed or self._lb is None:
            raise GpuPreprocessError("no frame staged (or closed)", call="GpuInputPath.launch")
        p = self._params
        p.dst = int(dst_ptr)
        p.src = int(src_ptr) if src_ptr is not None else self._dev + self._table_bytes
        _check(self._drv.cuLaunchKernel(self._function, self.grid, 1, 1, self.block, 1, 1, 0, int(stream),
                                        ctypes.addressof(self._argv), 0),
               "cuLaunchKernel", {"variant": self.variant, "grid": self.grid, "block": self.block,
                                  "stream": hex(int(stream))})
        _check(self._rt.cudaEventRecord(self._kernel_done, int(stream)), "cudaEventRecord",
               {"event": "kernel"})

    # -- teardown --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release events, device staging, pinned staging, module (reverse order). Idempotent."""
        if getattr(self, "_closed", True) and self._module is None and self._pinned is None:
            self._closed = True
            return
        self._closed = True
        errors: list[Exception] = []

        def step(fn: Any, *args: Any) -> None:
            try:
                fn(*args)
            except Exception as exc:  # keep releasing the rest; report the first failure
                errors.append(exc)

        rt = getattr(self, "_rt", None)
        if rt is not None and self._kernel_done is not None:
            step(lambda: _check(rt.cudaEventSynchronize(self._kernel_done), "cudaEventSynchronize"))
        for name in ("_kernel_done", "_upload_done"):
            ev = getattr(self, name)
            if ev is not None and rt is not None:
                setattr(self, name, None)
                step(lambda e=ev: _check(rt.cudaEventDestroy(e), "cudaEventDestroy"))
        if self._dev:
            dev, self._dev = self._dev, 0
            step(cr.free, dev)
        if self._pinned is not None:
            pinned, self._pinned = self._pinned, None
            step(pinned.free)
        if self._module is not None:
            mod, self._module, self._function = self._module, None, None
            self._functions = {}
            step(lambda: _check(self._drv.cuModuleUnload(mod), "cuModuleUnload"))
        if errors:
            raise errors[0]

    def __enter__(self) -> GpuInputPath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
