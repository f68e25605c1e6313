"""``evaluate`` on the user's own labelled data (``cli.eval_data``): the node's pipeline on every frame, then
COCO-style mAP (``cli.coco_map``), printed as a per-class table and optionally written as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.backends.factory import open_backend
from dla_infer_node.cli.coco_map import class_aps, coco_map
from dla_infer_node.cli.eval_data import DatasetNotes, bag_frames, folder_frames
from dla_infer_node.cli.eval_pipeline import Labelled, detect_all, evaluation_detector
from dla_infer_node.core.errors import ParameterError


@dataclass(frozen=True)
class DatasetResult:
    source: str
    frames: int
    objects_per_class: dict[str, int]
    ap50: dict[str, float | None]  # None: no ground truth of the class
    ap50_95: dict[str, float | None]
    map50: float
    map50_95: float
    notes: list[str]

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "frames": self.frames, "mAP50": round(self.map50, 4),
                "mAP50_95": round(self.map50_95, 4),
                "classes": {name: {"objects": self.objects_per_class[name], "AP50": _r(self.ap50[name]),
                                   "AP50_95": _r(self.ap50_95[name])} for name in self.objects_per_class},
                "left_out": self.notes}

    def table(self) -> str:
        width = max(len("class"), *(len(n) for n in self.objects_per_class))
        rows = [f"{'class':<{width}}  {'objects':>7}  {'AP50':>6}  {'AP50:95':>7}"]
        for name, count in self.objects_per_class.items():
            ap50, ap = _cell(self.ap50[name]), _cell(self.ap50_95[name])
            rows.append(f"{name:<{width}}  {count:>7}  {ap50:>6}  {ap:>7}")
        rows.append(f"{'all':<{width}}  {sum(self.objects_per_class.values()):>7}  {self.map50:>6.4f}  "
                    f"{self.map50_95:>7.4f}")
        return "\n".join(rows)


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _cell(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def frames_of(args: argparse.Namespace, classes: tuple[str, ...], notes: DatasetNotes) -> tuple[str, Any]:
    if args.labels is None:
        raise ParameterError("--labels", None, "COCO JSON (or a YOLO txt folder with --images) for your data")
    if args.bag is not None:
        if not args.topic:
            raise ParameterError("--topic", None, "an image topic of the bag (--bag needs it)")
        return (f"topic {args.topic} of {args.bag}",
                bag_frames(Path(args.bag), args.topic, Path(args.labels), classes, notes))
    return f"images in {args.images}", folder_frames(Path(args.images), Path(args.labels), classes, notes)


def run(args: argparse.Namespace, settings: Any) -> DatasetResult:
    """Open the backend as the node does, detect on every labelled frame, score."""
    opened, meta = open_backend(settings)
    notes = DatasetNotes()
    source, frames = frames_of(args, meta.classes, notes)
    crowds: list[tuple[np.ndarray, np.ndarray]] = []

    def labelled() -> Iterator[Labelled]:
        for f in frames:
            crowds.append((f.crowd_boxes, f.crowd_ids))
            yield f.image, f.encoding, f.boxes, f.class_ids

    with evaluation_detector(opened, meta) as detector:
        gts, dets = detect_all(detector, labelled())
    if not gts:
        raise ParameterError("--labels", args.labels, "labels for at least one frame of the data")
    counts = np.bincount(np.concatenate([c for _, c in gts]).astype(int), minlength=len(meta.classes))
    if not counts.sum():  # every AP undefined: a 0.0000 would read as a measured failure
        left_out = "; ".join(notes.lines())
        raise ParameterError("--labels", args.labels, f"labels with at least one object of the model's "
                             f"classes in the {len(gts)} frames scored (none found"
                             f"{'; ' + left_out if left_out else ''})")
    m50, m5095, table = coco_map(gts, dets, len(meta.classes), crowds=crowds)
    aps = class_aps(table)
    ap50 = {n: ap[0] if ap else None for n, ap in zip(meta.classes, aps, strict=True)}
    ap = {n: ap[1] if ap else None for n, ap in zip(meta.classes, aps, strict=True)}
    return DatasetResult(source, len(gts), {n: int(counts[k]) for k, n in enumerate(meta.classes)}, ap50, ap,
                         m50, m5095, notes.lines())


def report(result: DatasetResult, json_out: str | None) -> None:
    print(f"{result.source}: {result.frames} frames")
    for line in result.notes:
        print(f"note: {line}")
    print(result.table())
    if json_out == "-":
        print(json.dumps(result.as_json()))
    elif json_out:
        Path(json_out).write_text(json.dumps(result.as_json(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {json_out}", file=sys.stderr)
    print(f"mAP50={result.map50:.4f} mAP50_95={result.map50_95:.4f}")
