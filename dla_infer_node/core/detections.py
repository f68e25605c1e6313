"""The detector's result type: boxes in source-image pixels, scores and class ids, as numpy arrays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Detections:
    """``boxes`` (N, 4) float32 xyxy in source pixels, ``scores`` (N,) float32, ``class_ids`` (N,) int64."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray

    def __post_init__(self) -> None:
        # normalise once here so every consumer (node, detect CLI, evaluate) can rely on dtypes/shapes
        boxes = np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)
        scores = np.asarray(self.scores, dtype=np.float32).reshape(-1)
        class_ids = np.asarray(self.class_ids, dtype=np.int64).reshape(-1)
        if not (len(boxes) == len(scores) == len(class_ids)):
            raise ValueError(
                f"Detections: {len(boxes)} boxes, {len(scores)} scores, {len(class_ids)} class ids"
            )
        object.__setattr__(self, "boxes", boxes)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "class_ids", class_ids)

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    @classmethod
    def empty(cls) -> Detections:
        """No detections (a constructor; test emptiness with ``len(d) == 0``)."""
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))

    def label(self, i: int, classes: Sequence[str]) -> str:
        """Class name of detection ``i``; ids outside ``classes`` read as ``class_<id>``."""
        return class_name(int(self.class_ids[i]), classes)

    def to_list(self, classes: Sequence[str]) -> list[dict[str, Any]]:
        """JSON-ready ``[{"class", "score", "bbox": [x1, y1, x2, y2]}]`` (what ``detect --json`` prints).

        Numbers keep their full float32 value, written with the fewest digits that read back as the same
        float32: a score computed from this output (COCO mAP, say) equals one computed from the arrays.
        """
        return [
            {
                "class": self.label(i, classes),
                "score": _shortest(self.scores[i]),
                "bbox": [_shortest(v) for v in self.boxes[i]],
            }
            for i in range(len(self))
        ]


def class_name(class_id: int, classes: Sequence[str]) -> str:
    """The name of a class id; ids outside ``classes`` read as ``class_<id>``."""
    return classes[class_id] if 0 <= class_id < len(classes) else f"class_{class_id}"


def _shortest(v: np.float32) -> float:
    """The float32 ``v`` as the Python float with the fewest digits that rounds back to it (numpy's str
    of a float32 is that shortest form)."""
    return float(str(np.float32(v)))
