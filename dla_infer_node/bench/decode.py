"""Decode + NMS benchmark (not a test): ``python -m dla_infer_node.bench.decode [--out FILE]``.

Default output: bench/results/decode.json.

An 80-class 640x640 YOLOv8 output (8400 candidates) decoded on one core, at conf 0.25 (iou 0.45, max_det 100,
the node's defaults) and at conf 0.001 (iou 0.7, max_det 300, the mAP setting):

- ``yolov8`` (final output ``[1, 84, 8400]``), target < 2 ms at 0.001;
- ``yolov8_raw`` (the trimmed graph's six tensors: box ``[1, 64, H, W]`` + class logits ``[1, 80, H, W]``
  per stride), targets <= 1 ms at 0.25 and <= 2 ms at 0.001;
- the same ``yolov8`` candidates through the dense NMS way (``method="blocks"``, the fallback of the
  usual sparse way), for comparison.

Content: background cells with low class probabilities (uniform 0-0.05, so at 0.001 all 8400 pass the
threshold) and 20 objects with 20 confident candidates each, as in ``bench.core``. The raw tensors and the
final output hold the same detections (the final output is computed from the raw tensors by the v8 decode).
One core: BLAS threads are limited to 1 before numpy loads and the process is pinned to one CPU.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import statistics  # noqa: E402  (the thread limits must be set before numpy is imported)
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from dla_infer_node.bench import results_file  # noqa: E402
from dla_infer_node.bench.core import host_info, interleaved, timing_arguments  # noqa: E402
from dla_infer_node.core.decode import make_decoder, sigmoid  # noqa: E402
from dla_infer_node.core.model_meta import ModelMetadata, parse_metadata  # noqa: E402
from dla_infer_node.core.nms import nms  # noqa: E402

NC, SIZE, STRIDES, REG_MAX = 80, 640, (8, 16, 32), 16


def _metadata(kind: str) -> ModelMetadata:
    if kind == "yolov8":
        outputs = [{"name": "output0", "shape": [1, 4 + NC, sum((SIZE // s) ** 2 for s in STRIDES)]}]
    else:
        outputs = [{"name": f"{k}_s{s}",
                    "shape": [1, 4 * REG_MAX if k == "box" else NC, SIZE // s, SIZE // s]}
                   for s in STRIDES for k in ("box", "cls")]
    return parse_metadata({"input": {"name": "images", "width": SIZE, "height": SIZE},
                           "decoder": {"kind": kind, "num_classes": NC, "strides": list(STRIDES),
                                       "reg_max": REG_MAX},
                           "outputs": outputs, "classes": [f"c{i}" for i in range(NC)]},
                          Path("bench.meta.yaml"))


def raw_and_final(seed: int = 1, n_objects: int = 20,
                  per_object: int = 20) -> tuple[list[np.ndarray], np.ndarray]:
    """Raw head tensors and the final output the v8 decode makes of them (same content, two forms)."""
    rng = np.random.default_rng(seed)
    raw: list[np.ndarray] = []
    for s in STRIDES:
        g = SIZE // s
        box = rng.normal(0, 1, (1, 4 * REG_MAX, g, g)).astype(np.float32)
        p = rng.uniform(1e-4, 0.05, (1, NC, g, g))
        raw += [box, np.log(p / (1 - p)).astype(np.float32)]
    level = raw[0]  # objects on the stride-8 level: clusters of neighbouring cells
    for k in range(n_objects):
        cy, cx = rng.integers(4, SIZE // 8 - 4, 2)
        cells = rng.choice(64, per_object, replace=False)
        for c in cells:
            gy, gx = cy + c // 8 - 4, cx + c % 8 - 4
            dist = rng.integers(3, 12, 4)
            level[0, :, gy, gx] = -4.0
            level[0, np.arange(4) * REG_MAX + dist, gy, gx] = 6.0  # a peaked bin per side
            q = rng.uniform(0.3, 0.95)
            raw[1][0, k % NC, gy, gx] = np.log(q / (1 - q))
    cols = []
    for i, s in enumerate(STRIDES):
        box, cls = raw[2 * i][0], raw[2 * i + 1][0]
        g = SIZE // s
        d = box.reshape(4, REG_MAX, g * g)
        e = np.exp(d - d.max(1, keepdims=True))
        dist = (np.arange(REG_MAX, dtype=np.float32)[None, :, None] * e).sum(1) / e.sum(1)
        gy, gx = np.divmod(np.arange(g * g), g)
        ax, ay = gx + 0.5, gy + 0.5
        x1, y1, x2, y2 = ax - dist[0], ay - dist[1], ax + dist[2], ay + dist[3]
        xywh = np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]) * s
        cols.append(np.concatenate([xywh, sigmoid(cls.reshape(NC, g * g))]))
    return raw, np.concatenate(cols, 1)[None].astype(np.float32)


def bench(rounds: int, iters: int) -> dict[str, Any]:
    raw, final = raw_and_final()
    v8, v8raw = make_decoder(_metadata("yolov8")), make_decoder(_metadata("yolov8_raw"))
    settings = {"conf0.25": (0.25, 0.45, 100), "conf0.001": (0.001, 0.7, 300)}
    fns: dict[str, Any] = {}
    for name, (conf, iou, max_det) in settings.items():
        c = v8.candidates([final], conf)
        fns[f"yolov8_{name}"] = lambda a=(conf, iou, max_det): v8([final], *a)
        fns[f"yolov8_raw_{name}"] = lambda a=(conf, iou, max_det): v8raw(raw, *a)
        fns[f"nms_blocks_only_{name}"] = lambda c=c, t=iou, k=max_det: nms(
            c.boxes, c.scores, c.class_ids, t, k, method="blocks")
        fns[f"nms_auto_only_{name}"] = lambda c=c, t=iou, k=max_det: nms(c.boxes, c.scores, c.class_ids, t, k)
    t = interleaved(fns, rounds, iters)
    res: dict[str, Any] = {k: {"ms_median": statistics.median(v) * 1e3, "ms_min": min(v) * 1e3}
                           for k, v in t.items()}
    for name, (conf, iou, max_det) in settings.items():
        res[f"yolov8_{name}"]["above_conf"] = int(v8.candidates([final], conf).scores.size)
        res[f"yolov8_{name}"]["kept"] = len(v8([final], conf, iou, max_det))
        res[f"yolov8_raw_{name}"]["kept"] = len(v8raw(raw, conf, iou, max_det))
    res["targets_ms"] = {"yolov8_conf0.001": 2.0, "yolov8_raw_conf0.25": 1.0, "yolov8_raw_conf0.001": 2.0}
    return res


def main(argv: list[str] | None = None) -> int:
    args = timing_arguments("dla_infer_node.bench.decode", __doc__, argv)
    cpu = None
    if hasattr(os, "sched_setaffinity"):
        cpu = sorted(os.sched_getaffinity(0))[-1]
        os.sched_setaffinity(0, {cpu})
    result = {"host": host_info(pinned_cpu=cpu),
              "decode_80class_640": bench(3 if args.quick else args.rounds, 3 if args.quick else 40)}
    for k, v in result["decode_80class_640"].items():
        if "ms_median" in v:
            print(f"{k:<28} {v['ms_median']:.3f} ms (min {v['ms_min']:.3f})"
                  + (f"  kept {v['kept']}" if "kept" in v else ""))
    results_file.write(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
