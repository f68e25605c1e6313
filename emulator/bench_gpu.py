"""DLA EMULATOR (test infrastructure): part (b) of the GPU benchmark, the cuDLA backend's whole per-frame
host-side cost (upload + kernel + submit + output copies + sync + unpack + decode) with the emulator's
``echo`` program, GPU input path vs CPU pack path, interleaved frame by frame.

    make bench-gpu
    # = python -m emulator.bench_gpu --out bench/results/gpu.json

Runs ``dla_infer_node.bench.gpu``'s ``main`` (part (a), the kernel alone, and the results file) with this
part plugged in: the installed package never imports the emulator, which only a checkout has. The emulator
library must be loadable (``DLA_EMULATOR_LIB``; the Makefile builds it); the part is skipped, and said so
in the results, otherwise.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.backends.cudla import CudlaBackend, open_artifact
from dla_infer_node.bench import gpu
from dla_infer_node.bench.gpu import LAYOUTS, SCALE
from dla_infer_node.core.pipeline import Detector
from emulator.make_loadable import EmuTensor, write_artifact


def _echo_artifact(directory: Path, fmt: str, dtype: str) -> Any:
    """DLA EMULATOR echo loadable: 640x640 input in (fmt, dtype), three YOLOv5 raw heads (linear) out."""
    strides, nc = (8, 16, 32), 4
    no = 3 * (5 + nc)
    model = {"name": "bench_echo", "classes": [f"c{i}" for i in range(nc)],
             "input": {"name": "images", "width": 640, "height": 640, "channel_order": "rgb",
                       "mean": [0.0, 0.0, 0.0], "std": [255.0, 255.0, 255.0], "pad_value": 114},
             "decoder": {"kind": "yolov5_raw", "num_classes": nc, "strides": list(strides),
                         "anchors": [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119],
                                     [116, 90, 156, 198, 373, 326]]},
             "outputs": [{"name": f"p{i + 3}", "shape": [1, no, 640 // st, 640 // st]}
                         for i, st in enumerate(strides)]}
    inp = EmuTensor("images", fmt, dtype, (1, 3, 640, 640), SCALE if dtype == "int8" else None)
    outs = [EmuTensor(f"p{i + 3}", "linear", dtype, (1, no, 640 // st, 640 // st),
                      4.5 / 127.0 if dtype == "int8" else None) for i, st in enumerate(strides)]
    return write_artifact(directory, f"echo_{dtype}_{fmt}", "echo", [inp], outs, model)


def _input_path_only(backend: Any, frame: np.ndarray) -> float:
    """Seconds for the backend's input path alone: enqueue into the registered input buffer + stream sync."""
    stream = backend._stream
    dst = backend._dev_bufs[backend.inputs[0].index]
    t0 = time.perf_counter()
    backend._input.enqueue(frame, "rgb8", dst, stream.handle)
    stream.synchronize()
    return time.perf_counter() - t0


def bench_e2e(frames: int) -> dict[str, Any]:
    """Per-frame host-side cost of CudlaBackend + decode, GPU input path vs CPU pack path (emulated DLA)."""
    lib = os.environ.get("DLA_EMULATOR_LIB", "libcudla.so.1")
    try:  # loaded before the binding's first call, so cuda.bindings.cudla binds to this library
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        return {"skipped": f"{lib} not loadable ({exc}); build the DLA EMULATOR with emulator/build.sh "
                           "and set DLA_EMULATOR_LIB=<dir>/libcudla.so.1"}
    frame = np.random.default_rng(1).integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    out: dict[str, Any] = {"dla": "DLA EMULATOR (echo program, host-side copy through the layouts)",
                           "frame": "1920x1080 rgb8", "frames": frames, "layouts": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, dtype in LAYOUTS:
            art = _echo_artifact(Path(tmp), fmt, dtype)
            artifact = open_artifact(str(art.loadable), str(art.sidecar))
            dets = {dev: Detector(CudlaBackend(artifact, preprocess_device=dev), artifact.metadata,
                                  conf_threshold=0.3) for dev in ("cpu", "gpu")}
            try:
                raw = {dev: d.backend.infer(frame, "rgb8") for dev, d in dets.items()}
                diff = max(float(np.abs(a - b).max()) for a, b in
                           zip(raw["cpu"].tensors, raw["gpu"].tensors, strict=True))
                for d in dets.values():
                    for _ in range(10):
                        d.detect(frame, "rgb8")
                times: dict[str, list[float]] = {"cpu": [], "gpu": []}
                input_only: dict[str, list[float]] = {"cpu": [], "gpu": []}
                for i in range(frames):  # interleaved, alternating order
                    for dev in (("cpu", "gpu") if i % 2 == 0 else ("gpu", "cpu")):
                        t0 = time.perf_counter()
                        dets[dev].detect(frame, "rgb8")
                        times[dev].append(time.perf_counter() - t0)
                        input_only[dev].append(_input_path_only(dets[dev].backend, frame))
            finally:
                for d in dets.values():
                    d.close()
            entry: dict[str, Any] = {"echo_outputs_max_abs_diff_cpu_vs_gpu": diff}
            for dev, v in times.items():
                entry[dev] = {"median_ms": round(statistics.median(v) * 1e3, 3),
                              "p90_ms": round(float(np.percentile(v, 90)) * 1e3, 3),
                              "min_ms": round(min(v) * 1e3, 3),
                              "input_path_only_median_ms": round(statistics.median(input_only[dev]) * 1e3, 3)}
            entry["gpu_over_cpu_median"] = round(entry["gpu"]["median_ms"] / entry["cpu"]["median_ms"], 3)
            out["layouts"][f"{fmt}/{dtype}"] = entry
    return out


if __name__ == "__main__":
    raise SystemExit(gpu.main(sys.argv[1:], end_to_end=bench_e2e))
