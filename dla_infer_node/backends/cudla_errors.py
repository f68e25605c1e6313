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


# each stage's name is spelled once, on its class; the tuple is the order a backend start walks through them
STAGE_CLASSES: dict[str, type[CudlaStageError]] = {
    cls.stage: cls for cls in (RuntimeLibraryError, DeviceError, LoadableError, TensorError, MemoryStageError,
                               SubmitError, ExecutionError)
}
STAGES = tuple(STAGE_CLASSES)


# cudlaStatus values of NVIDIA's cudla.h (CUDLA_VER 1.5), the same in every cuda-bindings release: the
# binding's member SPELLING changed (13.3.1 'ErrorUmd', 13.5.0 'ERROR_UMD'), so nothing here is keyed by
# it. Names are printed from this table, in one spelling whatever binding is installed.
STATUS_NAMES: dict[int, str] = {
    0: "Success", 1: "ErrorInvalidParam", 2: "ErrorOutOfResources", 3: "ErrorCreationFailed",
    4: "ErrorInvalidAddress", 5: "ErrorOs", 6: "ErrorCuda", 7: "ErrorUmd", 8: "ErrorInvalidDevice",
    9: "ErrorInvalidAttribute", 10: "ErrorIncompatibleDlaSWVersion", 11: "ErrorMemoryRegistered",
    12: "ErrorInvalidModule", 13: "ErrorUnsupportedOperation", 14: "ErrorNvSci", 15: "ErrorDriverNotFound",
    0x40000001: "ErrorDlaErrInvalidInput", 0x40000002: "ErrorDlaErrInvalidPreAction",
    0x40000003: "ErrorDlaErrNoMem", 0x40000004: "ErrorDlaErrProcessorBusy",
    0x40000005: "ErrorDlaErrTaskStatusMismatch", 0x40000006: "ErrorDlaErrEngineTimeout",
    0x40000007: "ErrorDlaErrDataMismatch", 0x7FFFFFFF: "ErrorUnknown",
}
STATUS_VALUES: dict[str, int] = {name: value for value, name in STATUS_NAMES.items()}
DRIVER_NOT_FOUND = 15

# Why a status usually happens, as a hint for the person reading the log (keyed by the numeric status).
_STATUS_HINTS: dict[int, str] = {
    15: "the DLA kernel driver is missing: is this a Jetson (Xavier/Orin) with DLA on?",
    8: "dla_core must be below the DLA count (AGX Orin: 0 or 1)",
    2: "too many device handles (at most 16 per DLA) or DLA memory exhausted",
    10: "the loadable was built for another DLA software version: rebuild it with the TensorRT of this "
        "JetPack (its sidecar's build.tensorrt_version says which one built it; dla_doctor compares them)",
    7: "the DLA user-mode driver rejected the call; for module load this usually means the file is a "
       "TensorRT engine, not a loadable built with trtexec --buildDLAStandalone",
    11: "the buffer is already registered with this device handle",
    4: "a pointer is not registered with this device handle or not 32-byte aligned",
    13: "not allowed in hybrid mode (standalone mode, a stream under CUDA graph capture, a second module on "
        "one handle)",
    12: "the module handle is not loaded on this device handle",
    6: "a CUDA call inside cuDLA failed: is a CUDA context current on this thread?",
    0x40000006: "the DLA task exceeded its timeout (set_task_timeout_in_ms)",
}


def status_name(status: int | None) -> str:
    """The canonical name of a numeric cudla status (``7`` -> ``ErrorUmd``), binding-independent."""
    if status is None:
        return "?"
    return STATUS_NAMES.get(int(status), f"Status({int(status)})")


def status_hint(status: int | str | None) -> str | None:
    """The hint for a status, given as its number or its canonical name."""
    if status is None:
        return None
    value = STATUS_VALUES.get(status) if isinstance(status, str) else int(status)
    return _STATUS_HINTS.get(value) if value is not None else None


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
            value = int(status)
            cls = RuntimeLibraryError if value == DRIVER_NOT_FOUND else STAGE_CLASSES[stage]
            raise cls(f"failed with cudla.Status.{status_name(value)} ({value})", call=call, params=params,
                      hint=status_hint(value), status=value) from exc
        if is_library_missing(exc):
            raise RuntimeLibraryError(f"libcudla.so.1 not found: {str(exc).strip()}", call=call,
                                      params=params, hint=LIBRARY_HINT) from exc
        raise STAGE_CLASSES[stage](f"{type(exc).__name__}: {exc}", call=call, params=params) from exc
