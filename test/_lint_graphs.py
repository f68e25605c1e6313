"""Hand-built ONNX graphs for the ``dla_build lint`` tests (onnx.helper), and a reader of the verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dla_infer_node.dla_build.lint_graph import lint

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "shapes_yolo.onnx"
YOLO_FIXTURES = REPO / "test" / "fixtures" / "yolo"
F = TensorProto.FLOAT


def const(name: str, value: Any, dtype: Any = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def build(tmp_path: Path, nodes: list[onnx.NodeProto], in_shape: list[Any], *, inits: tuple = (),
          opset: int = 13, elem: int = F, extra_inputs: tuple = ()) -> Path:
    """A one-input graph whose output is the last node's first output; returns the saved file."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", elem, in_shape), *extra_inputs],
        [helper.make_empty_tensor_value_info(nodes[-1].output[0])], initializer=list(inits))
    domains = {n.domain for n in nodes if n.domain} - {"ai.onnx"}
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in sorted(domains))]
    model = helper.make_model(graph, opset_imports=opsets)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


def rows_of(path: Path, batch: int | None = None) -> dict[str, dict[str, str]]:
    return {r["name"]: r for r in lint(path, batch)["rows"]}


def yolov8_like_head(tmp_path: Path) -> Path:
    """The tail of an ultralytics v8 head for one level at 320 (40x40), as its exporter writes it."""
    nc, reg, a = 4, 16, 1600
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "wb"], ["box"], name="/model.22/cv2.0/Conv", kernel_shape=[1, 1]),
        n("Conv", ["x", "wc"], ["cls"], name="/model.22/cv3.0/Conv", kernel_shape=[1, 1]),
        n("Concat", ["box", "cls"], ["lvl"], name="/model.22/Concat", axis=1),
        n("Reshape", ["lvl", "s3"], ["flat"], name="/model.22/Reshape"),
        n("Split", ["flat", "split"], ["b", "c"], name="/model.22/Split", axis=1),
        n("Reshape", ["b", "s4"], ["b4"], name="/model.22/dfl/Reshape"),
        n("Transpose", ["b4"], ["bt"], name="/model.22/dfl/Transpose", perm=[0, 2, 1, 3]),
        n("Softmax", ["bt"], ["bs"], name="/model.22/dfl/Softmax", axis=1),
        n("Conv", ["bs", "wd"], ["bd"], name="/model.22/dfl/conv/Conv", kernel_shape=[1, 1]),
        n("Reshape", ["bd", "s5"], ["dist"], name="/model.22/dfl/Reshape_1"),
        n("Mul", ["dist", "stride"], ["scaled"], name="/model.22/Mul_2"),
        n("Sigmoid", ["c"], ["score"], name="/model.22/Sigmoid"),
        n("Concat", ["scaled", "score"], ["out"], name="/model.22/Concat_5", axis=1),
    ]
    inits = (const("wb", np.zeros((4 * reg, 8, 1, 1))), const("wc", np.zeros((nc, 8, 1, 1))),
             const("s3", [1, 4 * reg + nc, a], np.int64), const("split", [4 * reg, nc], np.int64),
             const("s4", [1, 4, reg, a], np.int64), const("wd", np.zeros((1, reg, 1, 1))),
             const("s5", [1, 4, a], np.int64), const("stride", np.full((1, a), 8.0)))
    return build(tmp_path, nodes, [1, 8, 40, 40], inits=inits)
