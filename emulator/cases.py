"""DLA EMULATOR (test infrastructure): test cases shared by the GPU tests, the CPU fake-driver test and
the doctor's self-check -- emulated artifacts for every io format/dtype, and synthetic frames of solid
rectangles whose colours are the oracle's classes (this colour -> class table exists only for tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from emulator.make_loadable import EmuTensor, OracleParams, write_artifact

# oracle test classes: class i is a rectangle of colour COLOURS[i] (RGB)
CLASSES = ("red", "green", "blue", "yellow")
COLOURS = ((220, 30, 30), (30, 200, 40), (40, 60, 220), (230, 220, 40))
BACKGROUND = (90, 90, 90)
NET = 128  # network input is NET x NET
STRIDES = (8, 16, 32)
ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)),
           ((116, 90), (156, 198), (373, 326)))
NA = 3
NO = 5 + len(CLASSES)
FINAL_ROWS = 20
IN_SCALE = 1.0 / 127.0  # int8 input: x in [0, 1]
RAW_SCALE = 4.5 / 127.0  # int8 raw heads: logits within +-4.5
FINAL_SCALE = 130.0 / 127.0  # int8 final table: pixel values up to NET

IN_VARIANTS = (("linear", "fp16"), ("linear", "int8"), ("hwc4", "fp16"), ("hwc4", "int8"),
               ("chw16", "fp16"), ("chw32", "int8"))
OUT_VARIANTS = (("linear", "fp16"), ("linear", "int8"), ("chw16", "fp16"), ("chw32", "int8"))


def model_doc(kind: str, channel_order: str = "rgb") -> dict[str, Any]:
    """ModelMetadata mapping of the emulated detector."""
    if kind == "raw":
        outputs = [{"name": f"p{i + 3}", "shape": [1, NA * NO, NET // s, NET // s]}
                   for i, s in enumerate(STRIDES)]
        decoder = {"kind": "yolov5_raw", "num_classes": len(CLASSES), "strides": list(STRIDES),
                   "anchors": [[v for wh in a for v in wh] for a in ANCHORS]}
    else:
        outputs = [{"name": "detections", "shape": [1, FINAL_ROWS, NO]}]
        decoder = {"kind": "yolov5_final", "num_classes": len(CLASSES)}
    return {"name": f"emulated_oracle_{kind}", "classes": list(CLASSES),
            "input": {"name": "images", "width": NET, "height": NET, "channel_order": channel_order,
                      "mean": [0.0, 0.0, 0.0], "std": [255.0, 255.0, 255.0], "pad_value": 114},
            "decoder": decoder, "outputs": outputs}


def _padded_c(fmt: str, c: int) -> int:
    v = {"chw16": 16, "chw32": 32}.get(fmt, 1)
    return -(-c // v) * v


def oracle_artifact(directory: str | Path, in_fmt: str, in_dt: str, out_fmt: str, out_dt: str,
                    kind: str = "raw", channel_order: str = "rgb", line_pad: int = 0) -> Any:
    """Emulated loadable + sidecar running the rectangle oracle with the given io formats."""
    in_t = EmuTensor("images", in_fmt, in_dt, (1, 3, NET, NET), IN_SCALE if in_dt == "int8" else None,
                     line_pad=line_pad)
    outs: list[EmuTensor] = []
    logical: dict[str, Sequence[int]] = {}
    if kind == "raw":
        for i, s in enumerate(STRIDES):
            name, c = f"p{i + 3}", NA * NO
            outs.append(EmuTensor(name, out_fmt, out_dt, (1, _padded_c(out_fmt, c), NET // s, NET // s),
                                  RAW_SCALE if out_dt == "int8" else None))
            logical[name] = [1, c, NET // s, NET // s]
    else:
        outs.append(EmuTensor("detections", out_fmt, out_dt, (1, _padded_c(out_fmt, FINAL_ROWS), NO, 1),
                              FINAL_SCALE if out_dt == "int8" else None))
        logical["detections"] = [1, FINAL_ROWS, NO]
    logical["images"] = [1, 3, NET, NET]
    oracle = OracleParams(colours=COLOURS, out_kind=kind, strides=STRIDES, anchors=ANCHORS,
                          channel_order=channel_order)
    stem = f"oracle_{kind}_{in_dt}_{in_fmt}_{out_dt}_{out_fmt}"
    return write_artifact(directory, stem, "oracle", [in_t], outs, model_doc(kind, channel_order), oracle,
                          logical)


def echo_artifact(directory: str | Path, in_fmt: str, in_dt: str, out_fmt: str, out_dt: str) -> Any:
    """Echo loadable: output 'echo' = the network input tensor, re-laid-out (for path comparisons)."""
    in_t = EmuTensor("images", in_fmt, in_dt, (1, 3, NET, NET), IN_SCALE if in_dt == "int8" else None)
    out_t = EmuTensor("echo", out_fmt, out_dt, (1, _padded_c(out_fmt, 3), NET, NET),
                      IN_SCALE if out_dt == "int8" else None)
    doc = model_doc("final")
    doc["outputs"] = [{"name": "echo", "shape": [1, 3, NET, NET]}]
    return write_artifact(directory, f"echo_{in_dt}_{in_fmt}_{out_dt}_{out_fmt}", "echo", [in_t], [out_t],
                          doc, None, {"images": [1, 3, NET, NET], "echo": [1, 3, NET, NET]})


@dataclass(frozen=True)
class Frame:
    image: np.ndarray  # (H, W, 3) uint8 RGB
    boxes: np.ndarray  # (N, 4) xyxy, source pixels (x1/y1 exclusive edges)
    class_ids: np.ndarray


def make_frame(seed: int, width: int = 128, height: int = 96, count: int = 3, unit: int = 1) -> Frame:
    """Non-overlapping solid rectangles on a flat background; sizes fit the anchors (12..40 px at NET).

    ``unit`` scales coordinates (2 for a 256x192 frame that letterboxes to exactly half size).
    """
    rng = np.random.default_rng(seed)
    img = np.empty((height, width, 3), np.uint8)
    img[:] = BACKGROUND
    boxes: list[list[float]] = []
    ids: list[int] = []
    tries = 0
    while len(boxes) < count and tries < 500:
        tries += 1
        w, h = (int(rng.integers(12, 41)) * unit for _ in range(2))
        x0 = int(rng.integers(2, max(3, width - w - 2))) // unit * unit
        y0 = int(rng.integers(2, max(3, height - h - 2))) // unit * unit
        if x0 + w > width - 1 or y0 + h > height - 1:
            continue
        if any(not (x0 + w + 3 * unit <= b[0] or b[2] + 3 * unit <= x0 or y0 + h + 3 * unit <= b[1]
                    or b[3] + 3 * unit <= y0) for b in boxes):
            continue
        k = int(rng.integers(0, len(COLOURS)))
        img[y0:y0 + h, x0:x0 + w] = COLOURS[k]
        boxes.append([x0, y0, x0 + w, y0 + h])
        ids.append(k)
    return Frame(img, np.array(boxes, np.float32).reshape(-1, 4), np.array(ids, np.int64))


def match_detections(frame: Frame, boxes: np.ndarray, class_ids: np.ndarray, tol: float) -> str | None:
    """None when every ground-truth box is found once with its class within ``tol`` px; else why not."""
    if len(boxes) != len(frame.boxes):
        return (f"{len(boxes)} detections for {len(frame.boxes)} rectangles: {boxes.tolist()} vs "
                f"{frame.boxes.tolist()}")
    used: set[int] = set()
    for gt, k in zip(frame.boxes, frame.class_ids, strict=True):
        err = np.abs(boxes - gt).max(axis=1)
        j = int(np.argmin(err))
        if err[j] > tol or j in used or int(class_ids[j]) != int(k):
            return (f"rectangle {gt.tolist()} class {k}: best {boxes[j].tolist()} class {class_ids[j]} "
                    f"err {err[j]:.2f}")
        used.add(j)
    return None
