"""CPU preprocess of a 1080p frame in every camera encoding against rgb8's, in one run:
``python -m dla_infer_node.bench.encodings [--out bench/results/encodings.json]``.

Each encoding's frame is made from the same camera-like RGB picture (``tools``-free: blurred noise, as
:mod:`dla_infer_node.bench.core` uses) and preprocessed for the shipped model (1920x1080 -> 640x360 in a
640x512 input). Beside the node's path (``Preprocessor``) the naive way is timed too: OpenCV's whole-frame
conversion (cv_bridge's code) followed by the rgb8 preprocess. The encodings are interleaved round by
round, so load from other processes hits them alike, in blocks spread over the run; each block gives
every encoding's median and its ratio to rgb8's median in that block, and the headline is the median of
the blocks' ratios (target: at most 2x rgb8, 1.5x as the stretch).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from dla_infer_node.bench.core import interleaved
from dla_infer_node.bench.results_file import write
from dla_infer_node.core.color_convert import to_packed8
from dla_infer_node.core.model_meta import load_metadata
from dla_infer_node.core.preprocess import Preprocessor
from dla_infer_node.core.resources import default_model_metadata
from dla_infer_node.core.synth_frames import frame_in

ENCODINGS = ("rgb8", "bgr8", "mono8", "yuyv", "uyvy", "nv12", "nv21", "bayer_rggb8", "bayer_grbg8",
             "bayer_rggb16", "rgb16", "mono16")
TARGET, STRETCH = 2.0, 1.5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dla_infer_node.bench.encodings",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default="bench/results/encodings.json", help="JSON result file")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between blocks")
    ap.add_argument("--quick", action="store_true", help="2 short blocks (smoke run)")
    args = ap.parse_args(argv)
    blocks, rounds, iters = (2, 3, 3) if args.quick else (args.blocks, 5, 20)
    spec = load_metadata(default_model_metadata()).input
    rng = np.random.default_rng(0)
    rgb = np.asarray(cv2.GaussianBlur(rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8), (0, 0), 3),
                     dtype=np.uint8)
    frames = {name: frame_in(rgb, name) for name in ENCODINGS}
    # one preprocessor per stream, as the node has one per camera
    pres = {name: Preprocessor(spec) for name in fns_names(frames)}
    fns: dict[str, Callable[[], object]] = {}
    for name, frame in frames.items():
        fns[name] = functools.partial(pres[name], frame, name)
        if name not in ("rgb8", "bgr8", "mono8"):
            key = f"{name} (convert, then preprocess)"
            fns[key] = functools.partial(_convert_then_preprocess, pres[key], frame, name)
    per_block: list[dict[str, float]] = []
    t0 = time.monotonic()
    for b in range(blocks):
        if b and args.gap:
            time.sleep(args.gap)
        t = interleaved(fns, rounds, iters)
        per_block.append({k: statistics.median(v) * 1e3 for k, v in t.items()})
    ratios = {k: [blk[k] / blk["rgb8"] for blk in per_block] for k in fns}
    result: dict[str, Any] = {
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "numpy": np.__version__, "opencv": cv2.__version__, "loadavg": os.getloadavg()},
        "frame": [1920, 1080], "model_input": [spec.width, spec.height],
        "blocks": blocks, "rounds_per_block": rounds, "iterations_per_round": iters,
        "seconds": round(time.monotonic() - t0, 1), "target_ratio": TARGET, "stretch_ratio": STRETCH,
        "encodings": {k: {"ms_median_of_blocks": statistics.median(blk[k] for blk in per_block),
                          "ratio_to_rgb8_median_of_blocks": statistics.median(ratios[k]),
                          "ratio_per_block": [round(r, 3) for r in ratios[k]],
                          "path": _path(k, pres[k], frames)} for k in fns},
    }
    print(f"preprocess 1920x1080 -> {spec.width}x{spec.height}, median of {blocks} blocks "
          f"(target <= {TARGET}x rgb8, stretch {STRETCH}x)")
    for k, r in result["encodings"].items():
        print(f"  {k:<38} {r['ms_median_of_blocks']:7.3f} ms  {r['ratio_to_rgb8_median_of_blocks']:5.2f}x  "
              f"{r['path']}")
    write(Path(args.out), result)
    print(f"wrote {args.out}")
    return 0


def _convert_then_preprocess(pre: Preprocessor, frame: np.ndarray, encoding: str) -> object:
    return pre(*to_packed8(frame, encoding))


def fns_names(frames: dict[str, np.ndarray]) -> list[str]:
    """Every timed stream: each encoding, and the naive way for each that needs a conversion."""
    return [k for name in frames for k in (name, f"{name} (convert, then preprocess)")
            if "(" not in k or name not in ("rgb8", "bgr8", "mono8")]


def _path(key: str, pre: Preprocessor, frames: dict[str, np.ndarray]) -> str:
    if "(" in key:
        return "whole-frame conversion (cv_bridge's code), then the 8-bit preprocess"
    return pre.conversion_path(frames[key], key)


if __name__ == "__main__":
    raise SystemExit(main())
