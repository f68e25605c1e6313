"""The backend protocol: construct (load) -> infer -> close.

A backend owns its accelerator resources and its input path: it receives the raw frame as an
``(H, W, C)`` uint8 view (C = 1, 3 or 4, as the encoding says) and returns the network's raw output
tensors as float32 arrays in the order the model metadata lists them, together with the letterbox
record needed to map boxes back to source pixels. Decoding happens outside the backend, so every
backend shares one decoder.

A backend whose accelerator runs on its own (the DLA) may also take a frame in two halves
(:class:`PipelinedBackend`): ``submit`` returns once the frame is on its way, ``collect`` waits for its
outputs. Up to ``frames_in_flight`` frames may be submitted and not yet collected, so the host prepares the
next frame and decodes the last one while the accelerator runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

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


@runtime_checkable
class PipelinedBackend(Backend, Protocol):
    """A backend that takes a frame in two halves (module docstring); ``infer`` is both at once."""

    @property
    def frames_in_flight(self) -> int:
        """How many frames may be submitted and not yet collected."""
        ...

    def submit(self, image: np.ndarray, encoding: str) -> Any:
        """Start one frame and return its ticket at once (no wait for the accelerator)."""
        ...

    def ready(self, ticket: Any) -> bool:
        """Whether ``collect(ticket)`` would return without waiting."""
        ...

    def collect(self, ticket: Any) -> RawOutputs:
        """Wait for a submitted frame's outputs (each ticket once)."""
        ...
