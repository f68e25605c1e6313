"""Shared helpers for the core tests: metadata records built in memory, no model files needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

from dla_infer_node.core.model_meta import ModelMetadata, parse_metadata

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


# ---- a tiny raw-head ONNX model (onnx.helper), for backend/pipeline/CLI tests -------------------------
W, H, NC, NA, STRIDES = 96, 64, 2, 3, (8, 16, 32)
NO = 5 + NC


def build_raw_model(path: Path, consts: list[np.ndarray] | None = None, input_name: str = "images",
                    seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """head_i = Conv1x1(AveragePool_stride_i(x)) (+ const_i): raw-head shaped outputs, weights returned."""
    rng = np.random.default_rng(seed)
    nodes, inits, outputs, weights = [], [], [], []
    for i, s in enumerate(STRIDES):
        w = rng.normal(0, 0.5, (NA * NO, 3, 1, 1)).astype(np.float32)
        b = rng.normal(0, 0.5, (NA * NO,)).astype(np.float32)
        weights.append((w, b))
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("AveragePool", [input_name], [f"p{i}"], kernel_shape=[s, s],
                                      strides=[s, s]))
        conv_out = f"head{i}" if consts is None else f"c{i}"
        nodes.append(helper.make_node("Conv", [f"p{i}", f"w{i}", f"b{i}"], [conv_out]))
        if consts is not None:
            inits.append(numpy_helper.from_array(consts[i].astype(np.float32), f"k{i}"))
            nodes.append(helper.make_node("Add", [conv_out, f"k{i}"], [f"head{i}"]))
        outputs.append(helper.make_tensor_value_info(f"head{i}", TensorProto.FLOAT,
                                                     [1, NA * NO, H // s, W // s]))
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info(
        input_name, TensorProto.FLOAT, [1, 3, H, W])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return weights


def write_metadata(path: Path, onnx_name: str, **kwargs: Any) -> ModelMetadata:
    """Metadata YAML for :func:`build_raw_model` (defaults) written to ``path``; returns the record."""
    meta = make_metadata(width=W, height=H, num_classes=NC, path=path, **kwargs)
    doc = {"name": path.name.split(".")[0], "onnx": onnx_name,
           "input": {"name": meta.input.name, "width": meta.input.width, "height": meta.input.height,
                     "channel_order": meta.input.channel_order, "mean": list(meta.input.mean),
                     "std": list(meta.input.std), "pad_value": meta.input.pad_value},
           "decoder": {"kind": meta.decoder.kind, "num_classes": meta.decoder.num_classes,
                       "strides": list(meta.decoder.strides),
                       "anchors": [[v for pair in a for v in pair] for a in meta.decoder.anchors]},
           "outputs": [{"name": o.name, "shape": list(o.shape)} for o in meta.outputs],
           "classes": list(meta.classes)}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return meta
