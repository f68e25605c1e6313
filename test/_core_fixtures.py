"""Shared helpers for the core tests: metadata records built in memory, no model files needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dla_infer_node.model_meta import ModelMetadata, parse_metadata

ANCHORS_3 = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]


def make_metadata(
    kind: str = "yolov5_raw",
    num_classes: int = 2,
    width: int = 320,
    height: int = 256,
    strides: tuple[int, ...] = (8, 16, 32),
    anchors: list[list[int]] | None = None,
    channel_order: str = "rgb",
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0),
    std: tuple[float, float, float] = (255.0, 255.0, 255.0),
    pad_value: int = 114,
    outputs: list[dict[str, Any]] | None = None,
    path: Path | None = None,
    input_name: str = "images",
    extra: dict[str, Any] | None = None,
) -> ModelMetadata:
    anchors = ANCHORS_3 if anchors is None else anchors
    if outputs is None:
        if kind == "yolov5_raw":
            na = len(anchors[0]) // 2
            outputs = [{"name": f"head{i}", "shape": [1, na * (5 + num_classes), height // s, width // s]}
                       for i, s in enumerate(strides)]
        elif kind == "yolov8":
            n = sum((height // s) * (width // s) for s in strides)
            outputs = [{"name": "output0", "shape": [1, 4 + num_classes, n]}]
        else:
            n = 3 * sum((height // s) * (width // s) for s in strides)
            outputs = [{"name": "output0", "shape": [1, n, 5 + num_classes]}]
    doc: dict[str, Any] = {
        "name": "test_model",
        "input": {"name": input_name, "width": width, "height": height, "channel_order": channel_order,
                  "mean": list(mean), "std": list(std), "pad_value": pad_value},
        "decoder": {"kind": kind, "num_classes": num_classes, "strides": list(strides),
                    "anchors": anchors if kind == "yolov5_raw" else []},
        "outputs": outputs,
        "classes": [f"c{i}" for i in range(num_classes)],
    }
    doc.update(extra or {})
    return parse_metadata(doc, path or Path("/nonexistent/test_model.meta.yaml"))
