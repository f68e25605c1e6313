"""The demo's report: statistics, the printed table, a contact sheet and a latency histogram (cv2 + numpy).

ROS-free: it works on plain records the demo collected (detections per stamp, receive times, the node's
last diagnostics), so it can be tested and reused on any capture.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from dla_infer_node.core.detections import Detections
from dla_infer_node.core.image_io import draw_detections


@dataclass
class FrameResult:
    """One processed frame as seen downstream: its stamp, detections and the two receive times."""

    stamp_ns: int
    names: list[str]
    scores: list[float]
    boxes: np.ndarray  # (N, 4) xyxy source pixels
    det_receive_ns: int
    image_receive_ns: int | None = None

    @property
    def latency_ms(self) -> float | None:
        if self.image_receive_ns is None:
            return None
        return (self.det_receive_ns - self.image_receive_ns) / 1e6


@dataclass
class GroundTruth:
    classes: tuple[str, ...]
    frames: dict[int, tuple[np.ndarray, list[str]]] = field(default_factory=dict)  # stamp -> (boxes, names)


def load_ground_truth(doc: Mapping[str, Any]) -> GroundTruth:
    """The sample bag's ``*.ground_truth.json`` (classes; frames with stamp, boxes_xyxy, class names/ids)."""
    classes = tuple(str(c) for c in doc.get("classes", ()))
    gt = GroundTruth(classes)
    for fr in doc.get("frames", ()):
        stamp = int(fr["stamp"]["sec"]) * 1_000_000_000 + int(fr["stamp"]["nanosec"])
        boxes = np.asarray(fr.get("boxes_xyxy", []), np.float64).reshape(-1, 4)
        if "class_names" in fr:
            names = [str(n) for n in fr["class_names"]]
        else:
            names = [classes[int(i)] for i in fr.get("class_ids", [])]
        gt.frames[stamp] = (boxes, names)
    return gt


def _iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return np.asarray(inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9))


def match_frame(boxes: np.ndarray, names: Sequence[str], scores: Sequence[float], g_boxes: np.ndarray,
                g_names: Sequence[str], iou_min: float = 0.5) -> tuple[list[bool], list[bool]]:
    """(is each detection correct, was each ground-truth object found): greedy class-aware matching by
    score at IoU >= ``iou_min``, each object matched at most once."""
    correct = [False] * len(names)
    found = [False] * len(g_names)
    ious = _iou_matrix(np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(g_boxes, np.float64))
    for i in np.argsort(-np.asarray(scores, np.float64)):
        cands = [j for j in range(len(g_names)) if not found[j] and g_names[j] == names[i]
                 and ious[i, j] >= iou_min]
        if cands:
            found[max(cands, key=lambda j: ious[i, j])] = True
            correct[i] = True
    return correct, found


def match_counts(frames: Sequence[FrameResult], gt: GroundTruth,
                 iou_min: float = 0.5) -> tuple[int, int, int]:
    """(true positives, detections, ground-truth objects) over frames that have ground truth."""
    tp = n_det = n_gt = 0
    for fr in frames:
        if fr.stamp_ns not in gt.frames:
            continue
        g_boxes, g_names = gt.frames[fr.stamp_ns]
        correct, _ = match_frame(fr.boxes, fr.names, fr.scores, g_boxes, g_names, iou_min)
        n_gt += len(g_names)
        n_det += len(fr.names)
        tp += sum(correct)
    return tp, n_det, n_gt


def as_numbers(values: Mapping[str, Any]) -> dict[str, Any]:
    """/diagnostics values are strings; counters back to int, rates and latencies to float, text kept."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        try:
            out[key] = int(value)
        except (TypeError, ValueError):
            try:
                out[key] = float(value)
            except (TypeError, ValueError):
                out[key] = value
    return out


def rate_hz(times_ns: Sequence[int]) -> float:
    """Messages per second over the span from the first to the last (nan for fewer than 2)."""
    if len(times_ns) < 2 or max(times_ns) == min(times_ns):
        return float("nan")
    return (len(times_ns) - 1) / ((max(times_ns) - min(times_ns)) / 1e9)


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q)) if len(values) else float("nan")


def table(rows: Sequence[tuple[str, str]], title: str) -> str:
    """A two-column plain-text table (label, value)."""
    w = max(len(r[0]) for r in rows)
    v = max(len(r[1]) for r in rows)
    line = "+" + "-" * (w + 2) + "+" + "-" * (v + 2) + "+"
    out = [title, line]
    out += [f"| {a.ljust(w)} | {b.rjust(v)} |" for a, b in rows]
    out.append(line)
    return "\n".join(out)


def per_class(frames: Sequence[FrameResult]) -> Counter[str]:
    return Counter(n for fr in frames for n in fr.names)


MISSED_COLOUR = (0, 165, 255)  # orange (bgr): a ground-truth object no detection found
FALSE_POSITIVE_COLOUR = (0, 0, 255)  # red: a detection that matches no ground-truth object
LEGEND = ("white: ground truth found   orange: ground truth MISSED   red: FALSE POSITIVE   "
          "coloured: correct detection (IoU >= 0.5, same class)")


def _label(canvas: np.ndarray, box: np.ndarray, text: str, colour: tuple[int, int, int]) -> None:
    x1, y1, x2, y2 = (round(float(v)) for v in box)
    cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, 4)  # drawn at source size: tiles are halved
    cv2.putText(canvas, text, (x1 + 2, max(y1 - 6, 20)), cv2.FONT_HERSHEY_SIMPLEX, 0.9, colour, 2,
                cv2.LINE_AA)


def _annotate(img: np.ndarray, fr: FrameResult | None, truth: tuple[np.ndarray, list[str]] | None,
              classes: Sequence[str]) -> tuple[np.ndarray, str]:
    """The frame with its ground truth and detections marked; a caption suffix with the counts."""
    canvas = img.copy()
    names = fr.names if fr is not None else []
    boxes = np.asarray(fr.boxes if fr is not None else np.zeros((0, 4)), np.float64).reshape(-1, 4)
    scores = fr.scores if fr is not None else []
    correct, found = ([True] * len(names), []) if truth is None else \
        match_frame(boxes, names, scores, truth[0], truth[1])
    if truth is not None:
        for box, hit in zip(truth[0], found, strict=True):
            if hit:
                x1, y1, x2, y2 = (round(float(v)) for v in box)
                cv2.rectangle(canvas, (x1, y1), (x2, y2), (255, 255, 255), 1)
    keep = [i for i, ok in enumerate(correct) if ok]
    if keep:
        index = {c: i for i, c in enumerate(classes)}
        dets = Detections(boxes[keep].astype(np.float32), np.asarray(scores, np.float32)[keep],
                          np.asarray([index.get(names[i], len(classes)) for i in keep], np.int64))
        canvas = draw_detections(canvas, "bgr8", dets, classes)
    for i, ok in enumerate(correct):
        if not ok:
            _label(canvas, boxes[i], f"FP {names[i]}", FALSE_POSITIVE_COLOUR)
    if truth is None:
        return canvas, f"{len(names)} detections"
    for box, name, hit in zip(truth[0], truth[1], found, strict=True):
        if not hit:
            _label(canvas, box, f"MISSED {name}", MISSED_COLOUR)
    return canvas, f"{len(keep)} ok, {len(names) - len(keep)} FP, {len(found) - sum(found)} missed"


def contact_sheet(images: Sequence[tuple[np.ndarray, FrameResult | None, str, int]], classes: Sequence[str],
                  gt: GroundTruth | None, columns: int = 4, tile_w: int = 320) -> np.ndarray:
    """Tiles of bgr8 frames (image, result or None when not processed, caption, stamp) with the ground
    truth and the detections marked (see :data:`LEGEND`), and the legend below them."""
    tiles = []
    for img, fr, caption, stamp in images:
        truth = gt.frames.get(stamp) if gt is not None else None
        canvas, counts = _annotate(img, fr, truth, classes)
        caption = f"{caption}: {counts}" if fr is not None else f"{caption}: not processed"
        h, w = canvas.shape[:2]
        tile = cv2.resize(canvas, (tile_w, max(1, round(h * tile_w / w))), interpolation=cv2.INTER_AREA)
        cv2.rectangle(tile, (0, 0), (tile_w - 1, 18), (0, 0, 0), -1)
        cv2.putText(tile, caption, (4, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (255, 255, 255), 1, cv2.LINE_AA)
        tiles.append(tile)
    if not tiles:
        return np.zeros((40, tile_w, 3), np.uint8)
    th = max(t.shape[0] for t in tiles)
    rows = []
    for r in range(0, len(tiles), columns):
        row = [np.pad(t, ((0, th - t.shape[0]), (0, 0), (0, 0))) for t in tiles[r:r + columns]]
        row += [np.zeros((th, tile_w, 3), np.uint8)] * (columns - len(row))
        rows.append(np.hstack(row))
    if gt is not None:
        legend = np.full((24, columns * tile_w, 3), 40, np.uint8)
        cv2.putText(legend, LEGEND, (6, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        rows.append(legend)
    return np.vstack(rows)


def histogram(values_ms: Sequence[float], title: str, width: int = 900, height: int = 420) -> np.ndarray:
    """A bar histogram with p50/p95 markers, drawn with cv2 (white background)."""
    img = np.full((height, width, 3), 255, np.uint8)
    left, right, top, bottom = 70, 20, 60, 50
    cv2.putText(img, title, (left, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
    vals = np.asarray([v for v in values_ms if np.isfinite(v)], np.float64)
    if vals.size == 0:
        cv2.putText(img, "no latency samples", (left, height // 2), cv2.FONT_HERSHEY_SIMPLEX, 0.6,
                    (0, 0, 255), 1)
        return img
    hi = float(np.percentile(vals, 99.5)) * 1.1 + 1e-3
    bins = 30
    counts, _ = np.histogram(np.clip(vals, 0, hi), bins=bins, range=(0.0, hi))
    pw, ph = width - left - right, height - top - bottom
    step = max(1, int(np.ceil(int(counts.max()) / 5)))  # about five whole-number ticks, each a grid line
    cmax = step * max(1, int(np.ceil(int(counts.max()) / step)))  # the axis ends on a tick
    for c in range(0, cmax + 1, step):  # grid first: the bars cover it
        y = top + ph - int(c * ph / cmax)
        cv2.line(img, (left - 5, y), (left + pw, y), (225, 225, 225) if c else (0, 0, 0), 1)
        cv2.putText(img, str(c), (left - 10 - 9 * len(str(c)), y + 5), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                    (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(img, "frames per bin", (8, top - 12), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1,
                cv2.LINE_AA)
    for i, c in enumerate(counts):
        x1 = left + int(i * pw / bins)
        x2 = left + int((i + 1) * pw / bins) - 2
        y1 = top + ph - int(c * ph / cmax)
        cv2.rectangle(img, (x1, y1), (x2, top + ph), (200, 120, 40), -1)
    cv2.line(img, (left, top + ph), (left + pw, top + ph), (0, 0, 0), 1)
    cv2.line(img, (left, top), (left, top + ph), (0, 0, 0), 1)
    for k in range(6):
        v = hi * k / 5
        x = left + int(v / hi * pw)
        cv2.line(img, (x, top + ph), (x, top + ph + 5), (0, 0, 0), 1)
        cv2.putText(img, f"{v:.0f}", (x - 10, top + ph + 20), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1)
    cv2.putText(img, "ms", (left + pw - 20, top + ph + 40), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1)
    for q, colour in ((50, (0, 160, 0)), (95, (0, 0, 220))):
        v = float(np.percentile(vals, q))
        x = left + int(min(v, hi) / hi * pw)
        cv2.line(img, (x, top), (x, top + ph), colour, 2)
        cv2.putText(img, f"p{q} {v:.1f} ms", (min(x + 4, width - 120), top + 15 + (q == 95) * 18),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.5, colour, 1, cv2.LINE_AA)
    return img


def write_png(path: Path, image: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), image):
        raise OSError(f"cannot write {path}")
    return path
