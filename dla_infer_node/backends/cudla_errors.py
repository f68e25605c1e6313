"""cuDLA failures as package errors: one class per stage, each naming the call, its parameters and
the ``cudla.Status`` name, so a log line alone tells where a deployment broke.

Stages, in the order a backend start walks through them:
``runtime_library`` (binding import, libcudla.so.1 found), ``device`` (CUDA context, cudlaCreateDevice),
``loadable`` (file checks, cudlaModuleLoadFromMemory), ``tensors`` (descriptors vs. artifact/metadata),
``memory`` (cudaMalloc, pinned host buffers, cudlaMemRegister), ``submit`` (cudlaSubmitTask and the
copies around it), ``execution`` (the DLA faulted while running: CUDA reports an error on a copy or a
stream sync, cudlaGetLastError says why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from dla_infer_node.core.errors import BackendError

STAGES = ("runtime_library", "device", "loadable", "tensors", "memory", "submit", "execution")

T = TypeVar("T")


class CudlaStageError(BackendError):
    """A cuDLA backend failure at one stage. ``status`` is the numeric cudla.Status (or None)."""

    stage = "cudla"

    def __init__(
        self,
        detail: str,
        *,
        call: str | None = None,
        params: Mapping[str, Any] | None = None,
        hint: str | None = None,
        status: int | None = None,
        cuda_error: int | None = None,
    ) -> None:
        self.status = status
        self.cuda_error = cuda_error
        super().__init__(detail, call=call, params=params, hint=hint)


class RuntimeLibraryError(CudlaStageError):
    stage = "runtime_library"


class DeviceError(CudlaStageError):
    stage = "device"


class LoadableError(CudlaStageError):
    stage = "loadable"


class TensorError(CudlaStageError):
    stage = "tensors"


class MemoryStageError(CudlaStageError):
    stage = "memory"


class SubmitError(CudlaStageError):
    stage = "submit"


class ExecutionError(CudlaStageError):
    """The DLA (or the CUDA work around it) failed after a successful submit.

    CUDA documents the process as being in an inconsistent state after such a fault: the node logs
    this error and exits non-zero so that the launch file's respawn restarts it.
    """

    stage = "execution"


STAGE_CLASSES: dict[str, type[CudlaStageError]] = {
    "runtime_library": RuntimeLibraryError,
    "device": DeviceError,
    "loadable": LoadableError,
    "tensors": TensorError,
    "memory": MemoryStageError,
    "submit": SubmitError,
    "execution": ExecutionError,
}

# Why a status usually happens, as a hint for the person reading the log.
_STATUS_HINTS: dict[str, str] = {
    "ErrorDriverNotFound": "the DLA kernel driver is missing: is this a Jetson (Xavier/Orin) with DLA on?",
    "ErrorInvalidDevice": "dla_core must be below the DLA count (AGX Orin: 0 or 1)",
    "ErrorOutOfResources": "too many device handles (at most 16 per DLA) or DLA memory exhausted",
    "ErrorIncompatibleDlaSWVersion": "the loadable was built for another DLA software version: rebuild "
                                     "it with the TensorRT of this JetPack",
    "ErrorUmd": "the DLA user-mode driver rejected the call; for module load this usually means the file "
                "is a TensorRT engine, not a loadable built with trtexec --buildDLAStandalone",
    "ErrorMemoryRegistered": "the buffer is already registered with this device handle",
    "ErrorInvalidAddress": "a pointer is not registered with this device handle or not 32-byte aligned",
    "ErrorUnsupportedOperation": "not allowed in hybrid mode (standalone mode, a stream under CUDA graph "
                                 "capture, a second module on one handle)",
    "ErrorInvalidModule": "the module handle is not loaded on this device handle",
    "ErrorCuda": "a CUDA call inside cuDLA failed: is a CUDA context current on this thread?",
    "ErrorDlaErrEngineTimeout": "the DLA task exceeded its timeout (set_task_timeout_in_ms)",
}


def status_name(status: int | None) -> str:
    """``cudla.Status`` member name for a number, without needing the binding for unknown values."""
    if status is None:
        return "?"
    try:
        from cuda.bindings import cudla

        return str(cudla.Status(int(status)).name)
    except Exception:  # binding missing or value not in the enum
        return f"Status({int(status)})"


def status_hint(name: str) -> str | None:
    return _STATUS_HINTS.get(name)


def is_library_missing(exc: BaseException) -> bool:
    """True for the binding's "libcudla.so.1 not found" error (cuda.pathfinder), raised at first call."""
    if type(exc).__name__ in ("DynamicLibNotFoundError", "DynamicLibNotAvailableError"):
        return True
    text = str(exc)
    return isinstance(exc, (RuntimeError, OSError)) and "libcudla" in text


LIBRARY_HINT = (
    "cuda.bindings imports fine but libcudla.so.1 is not loadable here: cuDLA ships with JetPack on "
    "Jetson (Xavier/Orin) only; on other machines use backend 'onnxruntime' (or, for tests, the DLA "
    "emulator via LD_LIBRARY_PATH, see emulator/README.md)"
)


def cudla_call(
    stage: str,
    call: str,
    params: Mapping[str, Any],
    fn: Callable[..., T],
    *args: Any,
) -> T:
    """Run one ``cuda.bindings.cudla`` call, translating its failures into the stage's error.

    A binding ``CudlaError`` carries the numeric status; a missing library becomes the
    ``runtime_library`` stage whatever call first noticed it.
    """
    try:
        return fn(*args)
    except CudlaStageError:
        raise
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status is not None and type(exc).__name__ == "CudlaError":
            name = status_name(status)
            cls = RuntimeLibraryError if name == "ErrorDriverNotFound" else STAGE_CLASSES[stage]
            raise cls(f"failed with cudla.Status.{name} ({int(status)})", call=call, params=params,
                      hint=status_hint(name), status=int(status)) from exc
        if is_library_missing(exc):
            raise RuntimeLibraryError(f"libcudla.so.1 not found: {str(exc).strip()}", call=call,
                                      params=params, hint=LIBRARY_HINT) from exc
        raise STAGE_CLASSES[stage](f"{type(exc).__name__}: {exc}", call=call, params=params) from exc
