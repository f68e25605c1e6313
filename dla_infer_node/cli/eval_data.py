"""Labelled frames for ``evaluate`` from the user's own data, no ROS needed.

* ``--images DIR --labels FILE.json``: COCO detection JSON (``images[].file_name`` relative to DIR,
  ``annotations[].bbox`` = [x, y, w, h] in pixels, ``categories[].name``). Categories are matched to the
  model's classes by name; objects of other categories and crowd regions are left out and counted.
* ``--images DIR --labels LABEL_DIR``: YOLO txt, one ``<image stem>.txt`` per image with lines
  ``class cx cy w h`` (normalised to the image size; class = the model's class index). An image without a
  txt has no objects, as in YOLO's own tools.
* ``--bag BAG --topic T --labels FILE.json``: COCO JSON whose ``file_name`` is a message's header stamp,
  ``<sec>.<nanosec, 9 digits>``; frames of the topic without an entry are not scored (and counted).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dla_infer_node.bags.bag_frames import image_frames
from dla_infer_node.core.errors import InputError, ParameterError
from dla_infer_node.core.image_io import IMAGE_FILE_SUFFIXES, read_image_file


@dataclass
class LabelledFrame:
    name: str
    image: np.ndarray  # (H, W, C) uint8
    encoding: str
    boxes: np.ndarray  # (N, 4) xyxy pixels
    class_ids: np.ndarray  # (N,) indices into the model's classes


@dataclass
class DatasetNotes:
    """What was left out, so a score is never silently about less than the user gave."""

    foreign_objects: dict[str, int] = field(default_factory=dict)  # category name -> count
    crowd_objects: int = 0
    unlabelled_frames: int = 0

    def lines(self) -> list[str]:
        out = []
        if self.foreign_objects:
            out.append(f"left out {sum(self.foreign_objects.values())} objects of classes the model lacks: "
                       f"{dict(sorted(self.foreign_objects.items()))}")
        if self.crowd_objects:
            out.append(f"left out {self.crowd_objects} crowd regions (iscrowd=1)")
        if self.unlabelled_frames:
            out.append(f"{self.unlabelled_frames} frames of the topic have no labels entry: not scored")
        return out


def _bad_labels(path: Path, detail: str) -> ParameterError:
    return ParameterError("--labels", str(path), f"COCO detection JSON or a YOLO txt folder ({detail})")


def read_coco(path: Path, classes: Sequence[str], notes: DatasetNotes
              ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """file_name -> (boxes xyxy, class ids)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        images = {int(im["id"]): str(im["file_name"]) for im in doc["images"]}
        names = {int(c["id"]): str(c["name"]) for c in doc["categories"]}
        annotations = list(doc.get("annotations", []))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _bad_labels(path, f"unreadable: {exc}") from exc
    index = {name: k for k, name in enumerate(classes)}
    rows: dict[str, list[tuple[list[float], int]]] = {f: [] for f in images.values()}
    for a in annotations:
        try:
            name = names[int(a["category_id"])]
            x, y, w, h = (float(v) for v in a["bbox"])
            file_name = images[int(a["image_id"])]
        except (KeyError, ValueError, TypeError) as exc:
            raise _bad_labels(path, f"bad annotation {a!r}: {exc}") from exc
        if a.get("iscrowd", 0):
            notes.crowd_objects += 1
        elif name not in index:
            notes.foreign_objects[name] = notes.foreign_objects.get(name, 0) + 1
        else:
            rows[file_name].append(([x, y, x + w, y + h], index[name]))
    return {f: (np.array([b for b, _ in r], float).reshape(-1, 4), np.array([c for _, c in r], int))
            for f, r in rows.items()}


def read_yolo_txt(label_dir: Path, stem: str, width: int, height: int, num_classes: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    path = label_dir / f"{stem}.txt"
    if not path.is_file():
        return np.zeros((0, 4)), np.zeros(0, int)
    boxes, ids = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            cls, cx, cy, w, h = int(parts[0]), *(float(v) for v in parts[1:5])
        except (ValueError, TypeError) as exc:
            raise InputError(f"{path}:{n}: expected 'class cx cy w h', got {line!r}", call="read_yolo_txt",
                             stage="evaluate") from exc
        if not 0 <= cls < num_classes:
            raise InputError(f"{path}:{n}: class {cls} outside the model's 0..{num_classes - 1}",
                             call="read_yolo_txt", stage="evaluate")
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
        for file_name, (boxes, ids) in sorted(table.items()):
            image = read_image_file(images / file_name, stage="evaluate")
            yield LabelledFrame(file_name, image, "bgr8", boxes, ids)
        return
    if not labels.is_dir():
        raise _bad_labels(labels, "not found")
    files = sorted(p for p in images.iterdir() if p.suffix.lower() in IMAGE_FILE_SUFFIXES)
    if not files:
        raise ParameterError("--images", str(images),
                             f"a folder holding {'/'.join(IMAGE_FILE_SUFFIXES)} files")
    for f in files:
        image = read_image_file(f, stage="evaluate")
        boxes, ids = read_yolo_txt(labels, f.stem, image.shape[1], image.shape[0], len(classes))
        yield LabelledFrame(f.name, image, "bgr8", boxes, ids)


def stamp_name(sec: int, nanosec: int) -> str:
    return f"{sec}.{nanosec:09d}"


def bag_frames(bag: Path, topic: str, labels: Path, classes: Sequence[str], notes: DatasetNotes
               ) -> Iterator[LabelledFrame]:
    table = read_coco(labels, classes, notes)
    for image, encoding, header in image_frames(bag, topic, "evaluate"):
        name = stamp_name(header.sec, header.nanosec)
        if name not in table:
            notes.unlabelled_frames += 1
            continue
        boxes, ids = table[name]
        yield LabelledFrame(name, np.array(image), encoding, boxes, ids)
