"""Labelled frames for ``evaluate`` from the user's own data, no ROS needed.

* ``--images DIR --labels FILE.json``: COCO detection JSON (``images[].file_name`` relative to DIR,
  ``annotations[].bbox`` = [x, y, w, h] in pixels, ``categories[].name``). Categories are matched to the
  model's classes by name; objects of other categories are left out and counted. Crowd regions
  (``iscrowd: 1``) are scored as COCOeval scores them: a detection on one is ignored (``cli.coco_map``).
* ``--images DIR --labels LABEL_DIR``: YOLO txt, one ``<image stem>.txt`` per image with lines
  ``class cx cy w h`` (normalised to the image size; class = the model's class index). An image without a
  txt has no objects, as in YOLO's own tools.
* ``--bag BAG --topic T --labels FILE.json``: COCO JSON whose ``file_name`` is a message's header stamp,
  ``<sec>.<nanosec, 9 digits>``; frames of the topic without an entry are not scored, and labelled stamps
  that match no frame are reported (both counted).

A label that cannot be a box of the image (a YOLO line of more than 5 fields such as a segmentation
polygon, YOLO coordinates outside [0, 1] (pixels, negative) or not finite, a COCO box of width or height
<= 0 or reaching more than 1 px outside the image) is left out and counted, and the first one is named.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.bags.bag_frames import image_frames
from dla_infer_node.core.errors import InputError, ParameterError
from dla_infer_node.core.image_io import IMAGE_FILE_SUFFIXES, read_image_file

# how far (pixels) a COCO box may reach past the image's border: rounding in the tools that write them
OUTSIDE_TOLERANCE_PX = 1.0


def _no_boxes() -> np.ndarray:
    return np.zeros((0, 4))


def _no_ids() -> np.ndarray:
    return np.zeros(0, int)


@dataclass
class LabelledFrame:
    name: str
    image: np.ndarray  # (H, W, C) uint8
    encoding: str
    boxes: np.ndarray  # (N, 4) xyxy pixels
    class_ids: np.ndarray  # (N,) indices into the model's classes
    crowd_boxes: np.ndarray = field(default_factory=_no_boxes)  # (M, 4) xyxy crowd regions (iscrowd: 1)
    crowd_ids: np.ndarray = field(default_factory=_no_ids)


@dataclass
class DatasetNotes:
    """What was left out, so a score is never silently about less than the user gave."""

    foreign_objects: dict[str, int] = field(default_factory=dict)  # category name -> count
    crowd_objects: int = 0
    unlabelled_frames: int = 0
    unmatched_labels: int = 0  # labelled stamps of a bag that match no frame of the topic
    unmatched_objects: int = 0
    invalid_labels: int = 0
    first_invalid: str = ""

    def invalid(self, where: str, why: str) -> None:
        self.invalid_labels += 1
        self.first_invalid = self.first_invalid or f"{where}: {why}"

    def lines(self) -> list[str]:
        out = []
        if self.foreign_objects:
            out.append(f"left out {sum(self.foreign_objects.values())} objects of classes the model lacks: "
                       f"{dict(sorted(self.foreign_objects.items()))}")
        if self.invalid_labels:
            out.append(f"left out {self.invalid_labels} invalid labels (the first: {self.first_invalid})")
        if self.crowd_objects:
            out.append(f"{self.crowd_objects} crowd regions (iscrowd=1): detections on them are ignored, "
                       f"as COCOeval does")
        if self.unlabelled_frames:
            out.append(f"{self.unlabelled_frames} frames of the topic have no labels entry: not scored")
        if self.unmatched_labels:
            out.append(f"{self.unmatched_labels} labelled stamps match no frame of the topic: their "
                       f"{self.unmatched_objects} objects not scored")
        return out


@dataclass
class ImageLabels:
    """One image's COCO labels, before they are checked against the image's size."""

    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)  # xyxy
    class_ids: list[int] = field(default_factory=list)
    crowd: list[bool] = field(default_factory=list)
    where: list[str] = field(default_factory=list)  # names the annotation in a note

    def frame(self, name: str, image: np.ndarray, encoding: str, notes: DatasetNotes) -> LabelledFrame:
        """The labelled frame, boxes that reach outside ``image`` left out (counted in ``notes``)."""
        h, w = image.shape[:2]
        t = OUTSIDE_TOLERANCE_PX
        keep = []
        for i, (x1, y1, x2, y2) in enumerate(self.boxes):
            if x1 < -t or y1 < -t or x2 > w + t or y2 > h + t:
                notes.invalid(self.where[i], f"box {[x1, y1, x2 - x1, y2 - y1]} reaches outside the "
                                             f"{w}x{h} image")
            else:
                keep.append(i)
        boxes = np.array([self.boxes[i] for i in keep], float).reshape(-1, 4)
        ids = np.array([self.class_ids[i] for i in keep], int)
        crowd = np.array([self.crowd[i] for i in keep], bool)
        notes.crowd_objects += int(crowd.sum())
        return LabelledFrame(name, image, encoding, boxes[~crowd], ids[~crowd], boxes[crowd], ids[crowd])


def _bad_labels(path: Path, detail: str) -> ParameterError:
    return ParameterError("--labels", str(path), f"COCO detection JSON or a YOLO txt folder ({detail})")


def _coco_box(a: dict[str, Any], where: str, notes: DatasetNotes) -> tuple[float, float, float, float] | None:
    """xyxy of an annotation's ``bbox`` [x, y, w, h]; None (counted) when it cannot be a box."""
    x, y, w, h = (float(v) for v in a["bbox"])
    if not all(math.isfinite(v) for v in (x, y, w, h)):
        notes.invalid(where, f"bbox {a['bbox']} is not finite")
    elif w <= 0 or h <= 0:
        notes.invalid(where, f"bbox {a['bbox']} has width or height <= 0")
    else:
        return x, y, x + w, y + h
    return None


def read_coco(path: Path, classes: Sequence[str], notes: DatasetNotes) -> dict[str, ImageLabels]:
    """file_name -> the image's labels (checked against its size when the image is read)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        images = {int(im["id"]): str(im["file_name"]) for im in doc["images"]}
        names = {int(c["id"]): str(c["name"]) for c in doc["categories"]}
        annotations = list(doc.get("annotations", []))
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise _bad_labels(path, f"unreadable: {' '.join(str(exc).split())}") from exc
    index = {name: k for k, name in enumerate(classes)}
    table = {f: ImageLabels() for f in images.values()}
    for n, a in enumerate(annotations):
        try:
            name = names[int(a["category_id"])]
            file_name = images[int(a["image_id"])]
            where = f"{path.name} annotation {a.get('id', f'#{n}')!r}"
            box = _coco_box(a, where, notes) if name in index else None
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise _bad_labels(path, f"bad annotation {str(a)[:80]}: {exc}") from exc
        if name not in index:
            notes.foreign_objects[name] = notes.foreign_objects.get(name, 0) + 1
        elif box is not None:
            labels = table[file_name]
            labels.boxes.append(box)
            labels.class_ids.append(index[name])
            labels.crowd.append(bool(a.get("iscrowd", 0)))
            labels.where.append(where)
    return table


def read_yolo_txt(label_dir: Path, stem: str, width: int, height: int, num_classes: int,
                  notes: DatasetNotes) -> tuple[np.ndarray, np.ndarray]:
    path = label_dir / f"{stem}.txt"
    if not path.is_file():
        return np.zeros((0, 4)), np.zeros(0, int)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: unreadable as UTF-8 text ({exc})", call="read_yolo_txt",
                         stage="evaluate") from exc
    boxes, ids = [], []
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) > 5:  # a segmentation polygon (class x1 y1 x2 y2 ...) or a score column
            notes.invalid(f"{path.name}:{n}", f"{len(parts)} fields, a box is 'class cx cy w h'")
            continue
        try:
            cls, cx, cy, w, h = int(parts[0]), *(float(v) for v in parts[1:5])
        except (ValueError, TypeError) as exc:
            raise InputError(f"{path}:{n}: expected 'class cx cy w h', got {line!r}", call="read_yolo_txt",
                             stage="evaluate") from exc
        if not 0 <= cls < num_classes:
            raise InputError(f"{path}:{n}: class {cls} outside the model's 0..{num_classes - 1}",
                             call="read_yolo_txt", stage="evaluate")
        if not (0 <= cx <= 1 and 0 <= cy <= 1 and 0 < w <= 1 and 0 < h <= 1):  # False for NaN too
            notes.invalid(f"{path.name}:{n}", f"{line.strip()!r}: cx, cy, w, h must be fractions of the "
                                              f"image size in [0, 1] (w, h > 0)")
            continue
        x1, y1 = (cx - w / 2) * width, (cy - h / 2) * height
        boxes.append([x1, y1, x1 + w * width, y1 + h * height])
        ids.append(cls)
    return np.array(boxes, float).reshape(-1, 4), np.array(ids, int)


def folder_frames(images: Path, labels: Path, classes: Sequence[str], notes: DatasetNotes
                  ) -> Iterator[LabelledFrame]:
    if not images.is_dir():
        raise ParameterError("--images", str(images), "a folder of images")
    if labels.is_file():
        table = read_coco(labels, classes, notes)
        for file_name, image_labels in sorted(table.items()):
            image = read_image_file(images / file_name, stage="evaluate")
            yield image_labels.frame(file_name, image, "bgr8", notes)
        return
    if not labels.is_dir():
        raise _bad_labels(labels, "not found")
    files = sorted(p for p in images.iterdir() if p.suffix.lower() in IMAGE_FILE_SUFFIXES)
    if not files:
        raise ParameterError("--images", str(images),
                             f"a folder holding {'/'.join(IMAGE_FILE_SUFFIXES)} files")
    for f in files:
        image = read_image_file(f, stage="evaluate")
        boxes, ids = read_yolo_txt(labels, f.stem, image.shape[1], image.shape[0], len(classes), notes)
        yield LabelledFrame(f.name, image, "bgr8", boxes, ids)


def stamp_name(sec: int, nanosec: int) -> str:
    return f"{sec}.{nanosec:09d}"


def bag_frames(bag: Path, topic: str, labels: Path, classes: Sequence[str], notes: DatasetNotes
               ) -> Iterator[LabelledFrame]:
    table = read_coco(labels, classes, notes)
    matched: set[str] = set()
    for image, encoding, header in image_frames(bag, topic, "evaluate"):
        name = stamp_name(header.sec, header.nanosec)
        if name not in table:
            notes.unlabelled_frames += 1
            continue
        matched.add(name)
        yield table[name].frame(name, np.array(image), encoding, notes)
    unmatched = [labels for name, labels in table.items() if name not in matched]
    notes.unmatched_labels = len(unmatched)
    notes.unmatched_objects = sum(len(u.boxes) for u in unmatched)
