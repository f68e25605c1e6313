"""Hand-built YOLO final-output graphs (onnx.helper) for the trim / raw-decoder tests, no ultralytics needed.

- :func:`build_v8_final`: a v8-style head as ultralytics exports it: per level a box conv (4*reg_max ch)
  and a class conv (nc ch), Reshape + Concat of the levels, DFL (Reshape, Transpose, Softmax over the bins,
  1x1 Conv with 0..reg_max-1 weights), dist2bbox against a constant anchor-point grid, times the strides,
  Sigmoid on the classes, output ``[1, 4+nc, N]``.
- :func:`build_v5_final`: the shipped raw-head model with the YOLOv5 decode appended in ONNX ops (Reshape,
  Transpose, Sigmoid, Split, xy*2 + grid, (wh*2)^2 * anchor grid, times stride, Concat), output
  ``[1, N, 5+nc]``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

V8_W, V8_H, V8_NC, REG_MAX, V8_STRIDES = 128, 96, 5, 16, (8, 16, 32)
V8_NAMES = {i: f"thing{i}" for i in range(V8_NC)}


def _const(inits: list[onnx.TensorProto], name: str, value: np.ndarray) -> str:
    inits.append(numpy_helper.from_array(value, name))
    return name


def build_v8_final(path: Path, seed: int = 0, nc: int = V8_NC) -> None:
    """``nc`` classes; ``nc = 4*REG_MAX`` gives box and class convs of the same width."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    box_flat, cls_flat, anchor_pts, stride_row = [], [], [], []
    for i, s in enumerate(V8_STRIDES):
        h, w = V8_H // s, V8_W // s
        # "backbone": a stride-s patchify conv + ReLU, then the two head convs (3x3, as ultralytics' last ones
        # are 1x1; any conv works for the pattern)
        # weights scaled by fan-in so features stay O(1): no class logit saturates the float32 sigmoid
        _const(inits, f"stem_w{i}", rng.normal(0, 1.0 / s / np.sqrt(3), (8, 3, s, s)).astype(np.float32))
        nodes.append(helper.make_node("Conv", ["images", f"stem_w{i}"], [f"stem{i}"], kernel_shape=[s, s],
                                      strides=[s, s]))
        nodes.append(helper.make_node("Relu", [f"stem{i}"], [f"feat{i}"]))
        _const(inits, f"box_w{i}", rng.normal(0, 0.8, (4 * REG_MAX, 8, 1, 1)).astype(np.float32))
        _const(inits, f"box_b{i}", rng.normal(0, 1.0, (4 * REG_MAX,)).astype(np.float32))
        _const(inits, f"cls_w{i}", rng.normal(0, 1.5, (nc, 8, 1, 1)).astype(np.float32))
        _const(inits, f"cls_b{i}", np.full(nc, -2.0, np.float32))
        nodes.append(helper.make_node("Conv", [f"feat{i}", f"box_w{i}", f"box_b{i}"], [f"/head/box{i}"]))
        nodes.append(helper.make_node("Conv", [f"feat{i}", f"cls_w{i}", f"cls_b{i}"], [f"/head/cls{i}"]))
        _const(inits, f"shape_box{i}", np.array([1, 4 * REG_MAX, h * w], np.int64))
        _const(inits, f"shape_cls{i}", np.array([1, nc, h * w], np.int64))
        nodes.append(helper.make_node("Reshape", [f"/head/box{i}", f"shape_box{i}"], [f"box_flat{i}"]))
        nodes.append(helper.make_node("Reshape", [f"/head/cls{i}", f"shape_cls{i}"], [f"cls_flat{i}"]))
        box_flat.append(f"box_flat{i}")
        cls_flat.append(f"cls_flat{i}")
        gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        anchor_pts.append(np.stack([gx.ravel() + 0.5, gy.ravel() + 0.5]))
        stride_row.append(np.full(h * w, s))
    n = sum(a.shape[1] for a in anchor_pts)
    nodes += [
        helper.make_node("Concat", box_flat, ["box_all"], axis=2),
        helper.make_node("Concat", cls_flat, ["cls_all"], axis=2),
        helper.make_node("Reshape", ["box_all", _const(inits, "dfl_shape", np.array([1, 4, REG_MAX, n],
                                                                                    np.int64))], ["dfl_r"]),
        helper.make_node("Transpose", ["dfl_r"], ["dfl_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["dfl_t"], ["dfl_p"], axis=1),
        helper.make_node("Conv", ["dfl_p", _const(inits, "dfl_w", np.arange(REG_MAX, dtype=np.float32)
                                                   .reshape(1, REG_MAX, 1, 1))], ["dfl_c"]),
        helper.make_node("Reshape", ["dfl_c", _const(inits, "dist_shape", np.array([1, 4, n], np.int64))],
                         ["dist"]),
        helper.make_node("Split", ["dist", _const(inits, "split22", np.array([2, 2], np.int64))],
                         ["lt", "rb"], axis=1),
        helper.make_node("Sub", [_const(inits, "anchors", np.concatenate(anchor_pts, 1)[None].astype(
            np.float32)), "lt"], ["x1y1"]),
        helper.make_node("Add", ["anchors", "rb"], ["x2y2"]),
        helper.make_node("Add", ["x1y1", "x2y2"], ["sum_xy"]),
        helper.make_node("Div", ["sum_xy", _const(inits, "two", np.array(2.0, np.float32))], ["c_xy"]),
        helper.make_node("Sub", ["x2y2", "x1y1"], ["wh"]),
        helper.make_node("Concat", ["c_xy", "wh"], ["xywh"], axis=1),
        helper.make_node("Mul", ["xywh", _const(inits, "strides", np.concatenate(stride_row)[None, None]
                                                .astype(np.float32))], ["box_px"]),
        helper.make_node("Sigmoid", ["cls_all"], ["cls_p"]),
        helper.make_node("Concat", ["box_px", "cls_p"], ["output0"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "v8_like", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, V8_H, V8_W])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + nc, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    names = {i: f"thing{i}" for i in range(nc)}
    helper.set_model_props(model, {"names": repr(names), "stride": "32", "imgsz": f"[{V8_H}, {V8_W}]"})
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def build_v5_final(raw_model: Path, raw_meta: Path, path: Path) -> tuple[list[int], list[list[float]]]:
    """Append the YOLOv5 decode to a raw-head model; returns (strides, flat anchors) it baked in."""
    meta = yaml.safe_load(raw_meta.read_text(encoding="utf-8"))
    model = onnx.load(str(raw_model))
    g = model.graph
    nc = int(meta["decoder"]["num_classes"])
    no = 5 + nc
    strides, anchors = meta["decoder"]["strides"], meta["decoder"]["anchors"]
    inits: list[onnx.TensorProto] = []
    flat = []
    for out, s, anc in zip(meta["outputs"], strides, anchors, strict=True):
        name, (_, c, h, w) = out["name"], out["shape"]
        na = c // no
        p = f"/v5dec/s{s}/"
        two = _const(inits, p + "two", np.array(2.0, np.float32))
        gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        grid = np.broadcast_to(np.stack([gx, gy], -1)[None, None] - 0.5, (1, na, h, w, 2)).astype(np.float32)
        agrid = np.broadcast_to(np.asarray(anc, np.float32).reshape(1, na, 1, 1, 2), (1, na, h, w, 2))
        g.node.extend([
            helper.make_node("Reshape", [name, _const(inits, p + "shape5", np.array([1, na, no, h, w],
                                                                                     np.int64))], [p + "r"]),
            helper.make_node("Transpose", [p + "r"], [p + "t"], perm=[0, 1, 3, 4, 2]),
            helper.make_node("Sigmoid", [p + "t"], [p + "sig"]),
            helper.make_node("Split", [p + "sig", _const(inits, p + "split", np.array([2, 2, nc + 1],
                                                                                       np.int64))],
                             [p + "xy", p + "wh", p + "conf"], axis=4),
            helper.make_node("Mul", [p + "xy", two], [p + "xy2"]),
            helper.make_node("Add", [p + "xy2", _const(inits, p + "grid", np.ascontiguousarray(grid))],
                             [p + "xyg"]),
            helper.make_node("Mul", [p + "xyg", _const(inits, p + "stride", np.array(float(s), np.float32))],
                             [p + "xy_px"]),
            helper.make_node("Mul", [p + "wh", p + "two"], [p + "wh2"]),
            helper.make_node("Pow", [p + "wh2", p + "two"], [p + "wh4"]),
            helper.make_node("Mul", [p + "wh4", _const(inits, p + "anchor_grid",
                                                       np.ascontiguousarray(agrid))], [p + "wh_px"]),
            helper.make_node("Concat", [p + "xy_px", p + "wh_px", p + "conf"], [p + "cat"], axis=4),
            helper.make_node("Reshape", [p + "cat", _const(inits, p + "rows", np.array(
                [1, na * h * w, no], np.int64))], [p + "y"]),
        ])
        flat.append(p + "y")
    g.node.append(helper.make_node("Concat", flat, ["output0"], axis=1))
    g.initializer.extend(inits)
    n = sum(o["shape"][1] // no * o["shape"][2] * o["shape"][3] for o in meta["outputs"])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, n, no]))
    helper.set_model_props(model, {"names": repr(dict(enumerate(meta["classes"])))})
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return list(strides), anchors
