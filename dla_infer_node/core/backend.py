"""The backend protocol: construct (load) -> infer -> close.

A backend owns its accelerator resources and its input path: it receives the raw frame as an
``(H, W, C)`` uint8 view (C = 1, 3 or 4, as the encoding says) and returns the network's raw output
tensors as float32 arrays in the order the model metadata lists them, together with the letterbox
record needed to map boxes back to source pixels. Decoding happens outside the backend, so every
backend shares one decoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from dla_infer_node.core.preprocess import Letterbox


@dataclass(frozen=True)
class RawOutputs:
    """Raw network outputs for one frame.

    ``tensors`` are float32, shaped as the ONNX graph declares them (NCHW for raw heads), in the
    order of ``ModelMetadata.outputs``; padded DLA channels are already stripped.
    """

    tensors: list[np.ndarray]
    letterbox: Letterbox


@runtime_checkable
class Backend(Protocol):
    """What the detector pipeline needs from an inference backend."""

    @property
    def name(self) -> str:
        """Short backend name as used by the ``backend`` parameter (e.g. ``onnxruntime``)."""
        ...

    def infer(self, image: np.ndarray, encoding: str) -> RawOutputs:
        """Run one frame. ``image`` is ``(H, W, C)`` uint8 with the channel order of ``encoding``."""
        ...

    def close(self) -> None:
        """Release every resource, in reverse order of acquisition. Idempotent."""
        ...
