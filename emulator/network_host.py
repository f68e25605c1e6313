"""DLA EMULATOR (test infrastructure): the host side of the ``network`` program -- runs the network an
emulated loadable embeds with ONNX Runtime, reading and writing the task's tensors in their DLA layouts.

    python -m emulator.network_host MODULE [ARGS...]
    # e.g. python -m emulator.network_host dla_infer_node.cli.evaluate --backend cudla --artifact X.yaml

loads the emulator (``DLA_EMULATOR_LIB``, default emulator/build/libcudla.so.1) before cuda.bindings.cudla
binds, registers the callback, then runs MODULE as ``__main__``. In-process: :func:`install`.

The emulator calls the callback from the task's CUDA host function (the driver's callback thread). A
ctypes callback takes the GIL there, so the Python thread waiting for the stream must not hold it:
cuda.bindings releases the GIL around cudaStreamSynchronize (checked on the GPU by
test_gpu/test_cudla_network.py, which would hang otherwise). Nothing here calls CUDA (not allowed in a
host function). Layouts are read by emulator/dla_layouts.py, not by the package's tensor_format.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import runpy
import struct
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from emulator import dla_layouts

ROOT = Path(__file__).resolve().parents[1]
NETWORK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                              ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p))


class NetworkHost:
    """Callback state: one ONNX Runtime session per embedded network (keyed by its sha256)."""

    def __init__(self, threads: int = 0) -> None:
        self.threads = threads
        self.sessions: dict[bytes, tuple[dla_layouts.Loadable, Any]] = {}
        self.errors: list[str] = []  # tracebacks of failed tasks (tests read them)
        self.tasks = 0
        self._lock = threading.Lock()
        self.c_callback = NETWORK_FN(self._callback)  # keep a reference: C holds the pointer

    def _session(self, blob_ptr: int, size: int) -> tuple[dla_layouts.Loadable, Any]:
        _, _, n_in, n_out, _, _ = struct.unpack("<6I", ctypes.string_at(blob_ptr + 8, 24))
        head = ctypes.string_at(blob_ptr, 32 + 192 * (n_in + n_out) + 44)
        key = hashlib.sha256(head).digest()  # records + the embedded network's sha256
        if key not in self.sessions:
            import onnxruntime as ort

            loadable = dla_layouts.parse(ctypes.string_at(blob_ptr, size))
            onnx_bytes = loadable.params[44:]
            if hashlib.sha256(onnx_bytes).digest() != loadable.params[4:36]:
                raise ValueError("embedded ONNX does not match the sha256 the loadable names")
            opts = ort.SessionOptions()
            if self.threads:
                opts.intra_op_num_threads = self.threads
            sess = ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
            self.sessions[key] = (loadable, sess)
        return self.sessions[key]

    def run(self, blob_ptr: int, size: int, ins: Any, outs: Any) -> None:
        loadable, sess = self._session(blob_ptr, size)
        feeds = {}
        for i, (rec, meta) in enumerate(zip(loadable.inputs, sess.get_inputs(), strict=True)):
            buf = np.ctypeslib.as_array((ctypes.c_uint8 * rec.size).from_address(ins[i]))
            feeds[meta.name] = dla_layouts.read(rec, buf)[:, : int(meta.shape[1])]
        results = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
        for i, rec in enumerate(loadable.outputs):
            buf = np.ctypeslib.as_array((ctypes.c_uint8 * rec.size).from_address(outs[i]))
            value = results[rec.name]
            dla_layouts.write(rec, buf, value if value.ndim == 4 else value.reshape(rec.shape[0], -1, 1, 1))

    def _callback(self, user: int, blob_ptr: int, size: int, ins: Any, outs: Any) -> int:
        try:
            with self._lock:
                self.run(int(blob_ptr), int(size), ins, outs)
                self.tasks += 1
            return 0
        except BaseException:  # never let an exception unwind into C
            self.errors.append(traceback.format_exc())
            print(f"emulator network host: task failed\n{self.errors[-1]}", file=sys.stderr)
            return 1


_HOST: NetworkHost | None = None


def install(lib: Any, threads: int = 0) -> NetworkHost:
    """Register a :class:`NetworkHost` with the loaded emulator ``lib`` (a ctypes.CDLL); returns it."""
    global _HOST
    host = NetworkHost(threads)
    lib.dlaEmuSetNetworkCallback.argtypes = [NETWORK_FN, ctypes.c_void_p]
    lib.dlaEmuSetNetworkCallback.restype = None
    lib.dlaEmuSetNetworkCallback(host.c_callback, None)
    _HOST = host
    return host


def load_emulator(path: str | None = None) -> Any:
    """Load the emulator library RTLD_GLOBAL (before cuda.bindings.cudla's first call binds libcudla)."""
    lib = path or os.environ.get("DLA_EMULATOR_LIB") or str(ROOT / "emulator" / "build" / "libcudla.so.1")
    if not Path(lib).is_file():
        raise SystemExit(f"network_host: emulator library {lib} not found (run emulator/build.sh)")
    return ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        print("usage: python -m emulator.network_host MODULE [ARGS...]", file=sys.stderr)
        return 2
    install(load_emulator())
    sys.argv = [args[0], *args[1:]]
    try:
        runpy.run_module(args[0], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
