"""GPU preprocessing benchmark (not a test).

``python -m dla_infer_node.bench.gpu [--out bench/results/gpu.json] [--frame WxH] [--layouts FMT/DTYPE,...]``

Needs a CUDA GPU with cuda-bindings and cuda-core. Two parts, in one run:

(a) Kernel alone, 1920x1080 rgb8 -> 640x640, each DLA input layout: time per launch from CUDA events
    over many launches, bytes moved (frame read once + the whole destination written) per second, as a
    fraction of a device-to-device copy of the same number of bytes timed in the same run. "hot" reuses
    one source and one destination (they fit in L2); "cold" rotates over enough buffers to exceed twice
    the L2, which is the number that compares with DRAM bandwidth.
(c) Kernel alone for every camera encoding the kernel reads (16-bit RGB/BGR(A)/mono, YUYV/UYVY, NV12/NV21,
    Bayer 8/16; 16-bit ones in both byte orders), 1920x1080 frames of random samples -> 640x640, each layout,
    the same measurement as (a), with each encoding's time over rgb8's in the same layout (target: at most
    1.3x) and as a fraction of a device-to-device copy of the same bytes (frame + destination).
    1920x1080 -> 640x360 is an exact 3:1 ratio, where every second resize tap has weight 0 and is not read;
    ``--frame 1280x720`` (2:1, both taps weighted) measures the general case.
(b) Whole per-frame host-side cost of the cuDLA backend through the DLA EMULATOR. The emulator is test
    infrastructure of the checkout, not part of the installed package, so that part lives in
    emulator/bench_gpu.py, which runs this module's ``main`` with it (``make bench-gpu``); run alone,
    this module records the part as skipped and says why.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.backends import cuda_runtime as cr
from dla_infer_node.backends import preprocess_kernel as pk
from dla_infer_node.backends.gpu_preprocess import GpuInputPath
from dla_infer_node.backends.gpu_preprocess_params import frame_shape, source_format, source_tables
from dla_infer_node.core.model_meta import InputSpec
from dla_infer_node.core.preprocess import Letterbox
from dla_infer_node.core.tensor_layout import TensorLayout

LAYOUTS = (("linear", "fp16"), ("linear", "int8"), ("hwc4", "fp16"), ("hwc4", "int8"),
           ("chw16", "fp16"), ("chw32", "int8"))
SCALE = 1.0 / 127.0
NO_EMULATOR = "needs the DLA EMULATOR: `make bench-gpu` runs emulator/bench_gpu.py"
SPEC = InputSpec("images", 640, 640, "rgb", (0.0, 0.0, 0.0), (255.0, 255.0, 255.0), 114)


def _ok(result: Any, call: str) -> Any:
    status, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(status) != 0:
        raise RuntimeError(f"{call} failed: {status}")
    return values[0] if len(values) == 1 else values


class _Graph:
    """``n`` repetitions of some stream work captured into one CUDA graph, timed with events per replay.

    Launching from Python costs more host time than these kernels take on the GPU, so timing a Python
    loop would measure the host; a graph replay measures back-to-back device work.
    """

    def __init__(self, rt: Any, stream: int, body: Any, n: int) -> None:
        self.rt, self.stream, self.n = rt, stream, n
        mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        _ok(rt.cudaStreamBeginCapture(stream, mode), "cudaStreamBeginCapture")
        try:
            for i in range(n):
                body(i)
        finally:
            graph = _ok(rt.cudaStreamEndCapture(stream), "cudaStreamEndCapture")
        self.graph = graph
        self.exec = _ok(rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")
        self.a = _ok(rt.cudaEventCreate(), "cudaEventCreate")
        self.b = _ok(rt.cudaEventCreate(), "cudaEventCreate")
        self.time()  # warm-up replay

    def time(self) -> float:
        """Milliseconds per repetition for one replay."""
        rt = self.rt
        _ok(rt.cudaEventRecord(self.a, self.stream), "cudaEventRecord")
        _ok(rt.cudaGraphLaunch(self.exec, self.stream), "cudaGraphLaunch")
        _ok(rt.cudaEventRecord(self.b, self.stream), "cudaEventRecord")
        _ok(rt.cudaEventSynchronize(self.b), "cudaEventSynchronize")
        return float(_ok(rt.cudaEventElapsedTime(self.a, self.b), "cudaEventElapsedTime")) / self.n

    def close(self) -> None:
        rt = self.rt
        rt.cudaEventDestroy(self.a)
        rt.cudaEventDestroy(self.b)
        rt.cudaGraphExecDestroy(self.exec)
        rt.cudaGraphDestroy(self.graph)


def _raw_launch(drv: Any, path: Any, dst: int, src: int, stream: int) -> None:
    """The kernel launch of GpuInputPath.launch without its event record (capturable, benchmark only)."""
    path._params.dst, path._params.src = dst, src
    _ok(drv.cuLaunchKernel(path._function, path.grid, 1, 1, path.block, 1, 1, 0, stream,
                           ctypes.addressof(path._argv), 0), "cuLaunchKernel")


def _bench_layout(rt: Any, drv: Any, cr: Any, s: int, frame: np.ndarray, layout: TensorLayout, l2: int,
                  iters: int, trials: int, encoding: str = "rgb8", size: tuple[int, int] = (1920, 1080)
                  ) -> dict[str, Any]:
    src_bytes = frame.nbytes
    moved = src_bytes + layout.size  # frame read once + every destination byte written
    k = max(2, -(-4 * l2 // moved))  # rotation set of twice the L2, read + write side
    half = moved // 2  # a copy of `half` bytes reads and writes `moved` bytes
    d2d = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
    dsts = [cr.malloc(layout.size) for _ in range(k)]
    srcs = [cr.malloc(src_bytes) for _ in range(k)]
    cbufs = [(cr.malloc(half), cr.malloc(half)) for _ in range(k)]
    try:
        with GpuInputPath(SPEC, layout, SCALE, *size) as path:
            path.enqueue(frame, encoding, dsts[0], s)
            staged = path._dev + path._table_bytes
            for p in srcs:
                _ok(rt.cudaMemcpyAsync(p, staged, src_bytes, d2d, s), "cudaMemcpyAsync")
            _ok(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")
            bodies = {
                "hot": lambda i: _raw_launch(drv, path, dsts[0], staged, s),
                "cold": lambda i: _raw_launch(drv, path, dsts[i % k], srcs[i % k], s),
                "copy_hot": lambda i: _ok(rt.cudaMemcpyAsync(cbufs[0][1], cbufs[0][0], half, d2d, s), "copy"),
                "copy_cold": lambda i: _ok(rt.cudaMemcpyAsync(cbufs[i % k][1], cbufs[i % k][0], half, d2d, s),
                                           "copy"),
            }
            graphs = {name: _Graph(rt, s, body, iters) for name, body in bodies.items()}
            res: dict[str, list[float]] = {name: [] for name in graphs}
            for _ in range(trials):  # interleaved so that clock changes hit all four alike
                for name, g in graphs.items():
                    res[name].append(g.time())
            for g in graphs.values():
                g.close()
            entry: dict[str, Any] = {"kernel_variant": list(path.variant), "grid": path.grid,
                                     "block": path.block}
    finally:
        for ptr in dsts + srcs + [b for pair in cbufs for b in pair]:
            cr.free(ptr)
    med = {name: statistics.median(v) for name, v in res.items()}
    entry.update({"dst_bytes": layout.size, "src_bytes": src_bytes, "bytes_moved": moved, "rotation": k})
    for mode in ("hot", "cold"):
        t_k, t_c = med[mode], med[f"copy_{mode}"]
        bw_k, bw_c = moved / (t_k * 1e-3), 2 * half / (t_c * 1e-3)
        entry[mode] = {"kernel_us": round(t_k * 1e3, 2), "kernel_GBps": round(bw_k / 1e9, 1),
                       "d2d_copy_us": round(t_c * 1e3, 2), "d2d_copy_GBps": round(bw_c / 1e9, 1),
                       "fraction_of_copy": round(bw_k / bw_c, 3),
                       "kernel_us_trials": [round(v * 1e3, 2) for v in res[mode]]}
    return entry


def bench_kernels(iters: int, trials: int, encodings: bool = False, size: tuple[int, int] = (1920, 1080),
                  layouts: tuple[tuple[str, str], ...] = LAYOUTS) -> dict[str, Any]:
    """(a), and (c) under the key ``"encodings"`` when ``encodings`` is set; ``size``: the frame's (w, h)."""
    from cuda.bindings import driver as drv
    from cuda.bindings import runtime as rt

    cr.make_context_current(0)
    stream = cr.Stream()
    l2 = int(_ok(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrL2CacheSize, 0), "L2 size"))
    w, h = size
    frame = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)
    out: dict[str, Any] = {"l2_bytes": l2, "frame": f"{w}x{h} rgb8", "net": "640x640", "layouts": {},
                           "method": "CUDA graph of N back-to-back launches (or copies), CUDA events "
                                     "per replay, median of interleaved replays"}
    try:
        for fmt, dtype in layouts:
            layout = TensorLayout.dense(fmt, dtype, 1, 3, 640, 640)
            out["layouts"][f"{fmt}/{dtype}"] = _bench_layout(rt, drv, cr, stream.handle, frame, layout, l2,
                                                             iters, trials, size=size)
        if encodings:
            out["encodings"] = _bench_encodings(rt, drv, cr, stream.handle, l2, iters, trials, size, layouts)
    finally:
        stream.destroy()
    return out


# each kernel family once per reading it has (the four Bayer tiles cost the same; aliases are skipped)
BENCH_ENCODINGS = ("rgb8", "bgr8", "rgba8", "mono8", "rgb16", "rgb16>", "bgra16", "mono16", "mono16>", "yuyv",
                   "uyvy", "nv12", "nv21", "bayer_rggb8", "bayer_gbrg8", "bayer_rggb16", "bayer_grbg16>")


def source_row_bytes(encoding: str, w: int, h: int) -> int:
    """Bytes of the distinct source rows the kernel reads for a ``w`` x ``h`` frame into SPEC (the tap rows
    of non-zero weight; Bayer: their 3x3 windows; NV: the chroma rows too). At these ratios every sector
    of such a row is touched, so this is what a cold run must fetch from DRAM."""
    lb = Letterbox.fit(w, h, SPEC.width, SPEC.height)
    y0, y1, _, b1 = pk.axis_taps(h, lb.new_h, clamp=False)
    rows = np.union1d(y0, y1[b1 != 0])
    fmt = source_format(encoding)
    step = source_tables(fmt, w)[2]
    if fmt.family.startswith("bayer"):
        centre = np.union1d(np.clip(y0, 1, h - 2), np.clip(y1[b1 != 0], 1, h - 2))
        rows = np.unique(np.clip(centre[:, None] + np.arange(-1, 2), 0, h - 1))
    elif fmt.family == "nv":
        rows = np.union1d(rows, h + rows // 2)
    return int(rows.size) * step


def _bench_encodings(rt: Any, drv: Any, cr: Any, s: int, l2: int, iters: int, trials: int,
                     size: tuple[int, int], layouts: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """(c): every encoding's kernel against rgb8's and against a copy of its bytes; ``>``: big-endian."""
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"frame": f"{size[0]}x{size[1]} random samples", "net": "640x640", "layouts": {},
                           "target": "cold kernel_us at most 1.3x rgb8's in the same layout"}
    for fmt, dtype in layouts:
        layout = TensorLayout.dense(fmt, dtype, 1, 3, 640, 640)
        rows: dict[str, Any] = {}
        for name in BENCH_ENCODINGS:
            encoding = name.rstrip(">")
            shape, dt = frame_shape(encoding, *size)
            frame = rng.integers(0, np.iinfo(dt).max + 1, shape, dtype=dt)
            frame = frame.astype(">u2") if name.endswith(">") else frame
            e = _bench_layout(rt, drv, cr, s, frame, layout, l2, iters, trials, encoding, size)
            keep = ("kernel_us", "d2d_copy_us", "fraction_of_copy")
            rows[name] = {"src_bytes": e["src_bytes"], "bytes_moved": e["bytes_moved"],
                          "src_row_bytes": source_row_bytes(encoding, *size),
                          **{mode: {k: e[mode][k] for k in keep} for mode in ("hot", "cold")}}
        for row in rows.values():
            # what the cold ratio would be if both kernels only waited for DRAM: rows read + destination
            row["bytes_over_rgb8"] = round((row["src_row_bytes"] + layout.size)
                                           / (rows["rgb8"]["src_row_bytes"] + layout.size), 3)
            for mode in ("hot", "cold"):
                row[mode]["over_rgb8"] = round(row[mode]["kernel_us"] / rows["rgb8"][mode]["kernel_us"], 3)
        out["layouts"][f"{fmt}/{dtype}"] = rows
    worst = max((row["cold"]["over_rgb8"], f"{lay} {name}") for lay, rows in out["layouts"].items()
                for name, row in rows.items())
    out["worst_cold_over_rgb8"] = {"ratio": worst[0], "where": worst[1]}
    return out


def _environment() -> dict[str, Any]:
    import platform

    import cv2

    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    env: dict[str, Any] = {"date_utc": now, "python": sys.version.split()[0], "numpy": np.__version__,
                           "opencv": cv2.__version__, "machine": platform.machine()}
    try:
        from cuda import bindings
        from cuda.bindings import runtime as rt

        env["cuda_bindings"] = bindings.__version__
        env["cuda_driver"] = int(_ok(rt.cudaDriverGetVersion(), "cudaDriverGetVersion"))
        env["cuda_runtime"] = int(_ok(rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion"))
        props = _ok(rt.cudaGetDeviceProperties(0), "cudaGetDeviceProperties")
        env["gpu"] = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
        import cuda.core

        env["cuda_core"] = getattr(cuda.core, "__version__", "?")
    except Exception as exc:  # environment facts are best effort
        env["error"] = f"{type(exc).__name__}: {exc}"
    return env


def _frame_size(text: str) -> tuple[int, int]:
    w, _, h = text.lower().partition("x")
    if not (w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0):
        raise argparse.ArgumentTypeError(f"frame size {text!r}: WxH in pixels, e.g. 1280x720")
    return int(w), int(h)


def _layouts(text: str) -> tuple[tuple[str, str], ...]:
    picked = tuple((fmt, dtype) for fmt, _, dtype in (item.partition("/") for item in text.split(",")))
    wrong = ["/".join(p) for p in picked if p not in LAYOUTS]
    if wrong:
        raise argparse.ArgumentTypeError(f"layouts {wrong}: not among {['/'.join(p) for p in LAYOUTS]}")
    return picked


def _chunk_bytes(text: str) -> dict[tuple[int, int], int]:
    out = {}
    for item in text.split(","):
        variant, _, cb = item.partition("=")
        es, _, cpg = variant.partition("x")
        try:
            key, value = (int(es), int(cpg)), int(cb)
            if key not in pk.CHUNK_BYTES:
                raise ValueError(f"no kernel variant {key}")
            pk.chunk_plan(*key, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"chunk bytes {item!r}: {exc}") from exc
        out[key] = value
    return out


def main(argv: list[str] | None = None,
         end_to_end: Callable[[int], dict[str, Any]] | None = None) -> int:
    """Run the benchmark; ``end_to_end(frames)`` is part (b), which emulator/bench_gpu.py supplies."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/gpu.json")
    ap.add_argument("--iters", type=int, default=200, help="kernel launches per graph replay")
    ap.add_argument("--trials", type=int, default=9, help="graph replays per measurement (median)")
    ap.add_argument("--frames", type=int, default=200, help="frames per path in the end-to-end part")
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--skip-encodings", action="store_true")
    ap.add_argument("--frame", type=_frame_size, default=(1920, 1080), metavar="WxH",
                    help="source frame size (default 1920x1080, an exact 3:1 ratio to 640; 1280x720 is 2:1)")
    ap.add_argument("--layouts", type=_layouts, default=LAYOUTS, metavar="FMT/DTYPE,...",
                    help="a subset of " + ",".join(f"{f}/{d}" for f, d in LAYOUTS))
    ap.add_argument("--chunk-bytes", type=_chunk_bytes, default={}, metavar="ESxCPG=BYTES,...",
                    help="tuning: bytes per thread of a kernel variant (element bytes x channels per atom), "
                         "e.g. 2x1=8,1x1=4; the results record what ran")
    a = ap.parse_args(argv)
    pk.CHUNK_BYTES.update(a.chunk_bytes)  # this process only: every path built from here on compiles them
    kernel = bench_kernels(a.iters, a.trials, encodings=not a.skip_encodings, size=a.frame, layouts=a.layouts)
    kernel["chunk_bytes"] = {f"{es}x{cpg}": cb for (es, cpg), cb in pk.CHUNK_BYTES.items()}
    results: dict[str, Any] = {"environment": _environment(), "kernel": kernel,
                               "encodings": kernel.pop("encodings", {"skipped": "--skip-encodings"})}
    if a.skip_e2e:
        results["end_to_end"] = {"skipped": "--skip-e2e"}
    elif end_to_end is None:
        results["end_to_end"] = {"skipped": NO_EMULATOR}
    else:
        results["end_to_end"] = end_to_end(a.frames)
    path = Path(a.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"{'layout':12} {'hot us':>8} {'cold us':>8} {'cold GB/s':>10} {'copy GB/s':>10} {'frac':>6}")
    for name, e in results["kernel"]["layouts"].items():
        c = e["cold"]
        print(f"{name:12} {e['hot']['kernel_us']:8.2f} {c['kernel_us']:8.2f} {c['kernel_GBps']:10.1f} "
              f"{c['d2d_copy_GBps']:10.1f} {c['fraction_of_copy']:6.3f}")
    enc = results["encodings"]
    if "layouts" in enc:
        print(f"{'encoding':15} " + " ".join(f"{lay:>19}" for lay in enc["layouts"])
              + "   (cold us, x rgb8, x rgb8's DRAM bytes)")
        for name in BENCH_ENCODINGS:
            cells = [enc["layouts"][lay][name] for lay in enc["layouts"]]
            print(f"{name:15} " + " ".join(f"{c['cold']['kernel_us']:6.2f} {c['cold']['over_rgb8']:4.2f}x "
                                           f"{c['bytes_over_rgb8']:4.2f}x" for c in cells))
        print(f"worst cold ratio over rgb8: {enc['worst_cold_over_rgb8']}")
    e2e = results["end_to_end"]
    if "layouts" in e2e:
        print(f"{'layout':12} {'cpu ms':>8} {'gpu ms':>8} {'gpu/cpu':>8} {'cpu in':>8} {'gpu in':>8} "
              f"{'echo diff':>10}")
        for name, e in e2e["layouts"].items():
            print(f"{name:12} {e['cpu']['median_ms']:8.3f} {e['gpu']['median_ms']:8.3f} "
                  f"{e['gpu_over_cpu_median']:8.3f} {e['cpu']['input_path_only_median_ms']:8.3f} "
                  f"{e['gpu']['input_path_only_median_ms']:8.3f} "
                  f"{e['echo_outputs_max_abs_diff_cpu_vs_gpu']:10.3g}")
    else:
        print("end-to-end:", e2e.get("skipped"))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
