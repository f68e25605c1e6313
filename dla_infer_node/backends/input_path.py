"""Pluggable input paths of the cuDLA backend: raw frame -> registered DLA input buffer.

Contract (read by the GPU-preprocess implementation, ``gpu_preprocess.GpuInputPath``):

* Constructed once at backend startup with ``(input_spec, layout, int8_scale, max_width, max_height)``:
  ``input_spec`` is the model's :class:`~dla_infer_node.core.model_meta.InputSpec` (size, channel order,
  mean/std, pad value), ``layout`` the :class:`~dla_infer_node.core.tensor_format.TensorLayout` derived from
  the loadable's input descriptor (format, dtype, byte strides, ``size``), ``int8_scale`` the artifact's
  calibration scale (``None`` for fp16; required for int8), ``max_width``/``max_height`` the largest
  frame accepted. Every buffer (pinned staging, device scratch, compiled kernels) is allocated here:
  ``enqueue`` must not allocate device or pinned memory.
* ``enqueue(image, encoding, dst_ptr, stream)`` enqueues, on the CUDA stream ``stream`` (an integer
  ``cudaStream_t`` handle), all work that fills the device buffer at ``dst_ptr`` (the DLA-registered
  input buffer, ``layout.size`` bytes, 32-byte aligned) with the letterboxed, normalised, quantised
  frame in ``layout`` — including zeroed pad channels / row pads. It must NOT synchronise the host
  with the stream: the backend submits the DLA task on the same stream right after, and may submit the
  next frame (into another buffer set) before it waits for this one. So the path guards its own staging:
  it rewrites a host staging buffer only once the previous frame's copy out of it has completed (an event
  recorded after that copy).
  ``image`` is the frame's view as :mod:`dla_infer_node.core.encodings` shapes it for ``encoding`` (a
  table name: ``(H, W, C)`` uint8 or uint16 for packed ones, ``(H, W, 2)`` for YUYV/UYVY, ``(H*3/2, W, 1)``
  for NV12/NV21, ``(H, W, 1)`` for Bayer; 16-bit views carry the message's byte order in their dtype).
  It returns the frame's :class:`~dla_infer_node.core.preprocess.Letterbox` (fixed geometry in the brief).
  Bad input (unsupported encoding, zero size, frame larger than max) raises
  :class:`~dla_infer_node.core.errors.InputError` before anything is enqueued.
* ``close()`` releases everything, idempotent, after the backend has synchronised the stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from dla_infer_node.backends import cuda_runtime
from dla_infer_node.core import encodings
from dla_infer_node.core.errors import InputError, ParameterError
from dla_infer_node.core.preprocess import Preprocessor

if TYPE_CHECKING:
    from dla_infer_node.core.model_meta import InputSpec
    from dla_infer_node.core.preprocess import Letterbox
    from dla_infer_node.core.tensor_layout import TensorLayout

INPUT_PATH_KINDS = ("cpu", "gpu")


@runtime_checkable
class InputPath(Protocol):
    """Fills the registered DLA input buffer for one frame, stream-ordered (see module docstring)."""

    def enqueue(self, image: np.ndarray, encoding: str, dst_ptr: int, stream: int) -> Letterbox:
        ...

    def close(self) -> None:
        ...


class SizedInputPath:
    """The construction every input path shares (module docstring): the model input, the descriptor's
    layout and the largest frame are kept here; each path's own setup (checks, buffers, kernels) is its
    ``_setup``, which gets the int8 scale and the path's own keyword options."""

    def __init__(
        self,
        input_spec: InputSpec,
        layout: TensorLayout,
        int8_scale: float | None,
        max_width: int,
        max_height: int,
        **options: Any,
    ) -> None:
        self._spec, self._layout = input_spec, layout
        # kept as given: each path checks its arguments in its own order in _setup
        self._max_w, self._max_h = max_width, max_height
        self._setup(int8_scale, **options)

    def _setup(self, *args: Any, **options: Any) -> None:  # each path takes its own options
        raise NotImplementedError


class CpuInputPath(SizedInputPath):
    """CPU letterbox + pack into a pinned host buffer, then one async H2D copy on the stream.

    The pinned buffer is allocated once; an event recorded after each copy out of it is waited for before
    the next frame is packed into it (the backend may have submitted a later frame before it waits for
    this one). ``cuda`` replaces :mod:`dla_infer_node.backends.cuda_runtime` (tests substitute a fake
    runtime).
    """

    def _setup(self, int8_scale: float | None, cuda: Any = None) -> None:
        layout = self._layout
        if layout.dtype == "int8" and int8_scale is None:
            raise ParameterError("int8_scale", None, "a positive float for an int8 input tensor")
        self._scale = int8_scale if layout.dtype == "int8" else None
        self._max_w, self._max_h = int(self._max_w), int(self._max_h)
        self._cr = cr = cuda if cuda is not None else cuda_runtime
        self._pre = Preprocessor(self._spec)
        self._copied: Any = None
        self._pinned: Any = cr.PinnedBuffer(layout.size, what="input staging")
        try:
            self._copied = cr.Event()
        except BaseException:
            self.close()
            raise

    def enqueue(self, image: np.ndarray, encoding: str, dst_ptr: int, stream: int) -> Letterbox:
        if self._pinned is None:
            raise InputError("input path is closed", call="CpuInputPath.enqueue")
        w, h = encodings.frame_size(*encodings.validate(image, encoding))
        if h > self._max_h or w > self._max_w:
            raise InputError(
                f"frame {w}x{h} larger than the configured maximum "
                f"{self._max_w}x{self._max_h}",
                call="CpuInputPath.enqueue", params={"encoding": encoding})
        self._copied.synchronize(stage="submit")  # the previous frame's copy may still read the staging
        lb = self._pre.into_layout(image, encoding, self._layout, self._pinned.array, self._scale)
        self._cr.memcpy_htod_async(dst_ptr, self._pinned.ptr, self._layout.size, stream)
        self._copied.record(stream)
        return lb

    def close(self) -> None:
        """The event, then the staging buffer (after the backend synchronised the stream). Idempotent."""
        event, self._copied = self._copied, None
        buf, self._pinned = self._pinned, None
        try:
            if event is not None:
                event.destroy()
        finally:
            if buf is not None:
                buf.free()
