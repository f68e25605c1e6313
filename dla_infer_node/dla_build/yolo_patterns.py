"""Recognise a YOLO detection head in an ONNX graph and read the decoder's facts from it.

The head is found by its shape in the graph, not by node names (exporters rename freely):

1. Walk back from the graph outputs through the decode ops (Reshape, Concat, Split, Slice, Transpose,
   Sigmoid, Softmax, arithmetic...) and stop at every convolution: those are the per-level head
   convolutions, the last layers the DLA should run. The DFL convolution of a v8 head (a 1x1 Conv with a
   constant ``[1, reg_max, 1, 1]`` weight holding 0, 1, ..., reg_max-1) is part of the decode and is walked
   through, not stopped at. Shape nodes are not followed (they read no data).
2. A DFL convolution on the way means the YOLOv8 / YOLO11 / YOLOv5u head ("v8"): per level a box conv of
   ``4*reg_max`` channels and a class conv of ``nc`` channels. The box conv is the one whose output reaches
   the DFL (a second walk, from the DFL's input), so a model with ``nc == 4*reg_max`` classes is read
   right. None means the anchor-based YOLOv5 head ("v5"): per level one conv of ``na*(5+nc)`` channels,
   ``nc`` from the final output ``[1, N, 5+nc]``.
3. Levels are told apart by their spatial size; stride = input height / level height.
4. v5 anchors are read from the graph's own constants: the anchor grid is the constant, consumed by that
   level's decode, that is ``na`` pixel (w, h) pairs repeated over the grid (the xy offset grid varies over
   the grid cells and so is not taken for it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from dla_infer_node.core.errors import ModelError

STOP_WALK_OPS = {"Shape", "Size"}  # data-independent inputs: the walk would leak into the backbone


@dataclass(frozen=True)
class Level:
    stride: int
    height: int
    width: int
    tensors: tuple[str, ...]  # v8: (box, cls); v5: (raw,)
    channels: tuple[int, ...]


@dataclass(frozen=True)
class YoloHead:
    family: str  # "v8" (v8, v11, v5u) or "v5" (anchor-based)
    input_name: str
    input_height: int
    input_width: int
    num_classes: int
    levels: tuple[Level, ...]  # ascending stride
    reg_max: int = 0
    anchors: tuple[tuple[tuple[float, float], ...], ...] = ()


class _Graph:
    """Producers, consumers, constants and inferred shapes of a model's main graph."""

    def __init__(self, model: onnx.ModelProto) -> None:
        inferred = onnx.shape_inference.infer_shapes(model)
        g = inferred.graph
        self.graph = g
        self.producer = {o: n for n in g.node for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in g.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.const = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for n in g.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.const[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.shapes: dict[str, tuple[int, ...]] = {}
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            dims = vi.type.tensor_type.shape.dim
            if dims and all(d.HasField("dim_value") for d in dims):
                self.shapes[vi.name] = tuple(int(d.dim_value) for d in dims)

    def is_dfl_conv(self, node: onnx.NodeProto) -> int:
        """reg_max when ``node`` is a DFL convolution (constant arange weight [1, R, 1, 1]), else 0."""
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in self.const:
            return 0
        w = self.const[node.input[1]]
        if w.ndim == 4 and w.shape[0] == 1 and w.shape[2:] == (1, 1) and w.shape[1] > 1 and np.array_equal(
                w.reshape(-1), np.arange(w.shape[1], dtype=w.dtype)):
            return int(w.shape[1])
        return 0

    def head_convs(self, starts: list[str] | None = None) -> tuple[list[str], int, list[str]]:
        """(output tensors of the per-level head convolutions, reg_max or 0, the DFL convolutions' inputs)
        by the walk of step 1, from the graph outputs or from ``starts``."""
        seen: set[str] = set()
        heads: list[str] = []
        dfl_inputs: list[str] = []
        reg_max = 0
        todo = deque(starts if starts is not None else [o.name for o in self.graph.output])
        while todo:
            t = todo.popleft()
            node = self.producer.get(t)
            if t in seen or node is None:
                continue
            seen.add(t)
            if node.op_type == "Conv":
                r = self.is_dfl_conv(node)
                if not r:
                    heads.append(t)
                    continue
                reg_max = r
                dfl_inputs.append(node.input[0])
            if node.op_type in STOP_WALK_OPS:
                continue
            todo.extend(i for i in node.input if i and i not in self.const)
        return heads, reg_max, dfl_inputs

    def downstream_constants(self, tensor: str, exclude: set[str]) -> list[np.ndarray]:
        """Constants read by the nodes downstream of ``tensor`` that are not downstream of ``exclude``."""
        mine = self._downstream({tensor})
        others = self._downstream(exclude)
        out: list[np.ndarray] = []
        for n in self.graph.node:
            if id(n) in mine and id(n) not in others:
                out.extend(self.const[i] for i in n.input if i in self.const)
        return out

    def _downstream(self, starts: set[str]) -> set[int]:
        nodes: set[int] = set()
        todo = deque(starts)
        while todo:
            for n in self.consumers.get(todo.popleft(), []):
                if id(n) not in nodes:
                    nodes.add(id(n))
                    todo.extend(n.output)
        return nodes


def _anchor_pairs(candidates: list[np.ndarray], na: int) -> tuple[tuple[float, float], ...] | None:
    for a in candidates:
        if a.dtype.kind != "f" or a.ndim < 2 or a.shape[-1] != 2 or a.size % (2 * na) or a.size < 2 * na:
            continue
        # anchor axis right after the batch axis (the exporter's [1, na, H, W, 2] / [1, na, 1, 1, 2])
        per = a.reshape(na, -1, 2) if a.shape[0] == 1 or a.ndim < 5 else None
        if per is None or not np.all(per > 0) or np.ptp(per, axis=1).max() != 0:
            continue
        if per.shape[1] == 1 and na == 1:
            continue  # a single pair is ambiguous (could be a scalar-like stride pair)
        return tuple((float(p[0, 0]), float(p[0, 1])) for p in per)
    return None


def _fail(detail: str, path: str) -> ModelError:
    return ModelError(detail, call="recognise_yolo_head", params={"model": path}, stage="trim",
                      hint="name the cut tensors with --outputs")


def recognise(model: onnx.ModelProto, path: str = "") -> YoloHead:
    """The YOLO head of ``model`` (see the module docstring), or a ModelError saying what is missing."""
    g = _Graph(model)
    inits = {t.name for t in g.graph.initializer}
    inputs = [i for i in g.graph.input if i.name not in inits]
    if len(inputs) != 1 or len(g.shapes.get(inputs[0].name, ())) != 4:
        raise _fail("expected one static 4-D image input [1, 3, H, W]", path)
    _, _, in_h, in_w = g.shapes[inputs[0].name]
    heads, reg_max, dfl_inputs = g.head_convs()
    if not heads:
        raise _fail("no convolution found behind the graph outputs", path)
    if any(len(g.shapes.get(t, ())) != 4 for t in heads):
        raise _fail("a head convolution has no static 4-D shape", path)
    by_size: dict[tuple[int, int], list[str]] = {}
    for t in heads:
        by_size.setdefault((g.shapes[t][2], g.shapes[t][3]), []).append(t)
    levels = []
    for (h, w), ts in sorted(by_size.items(), key=lambda kv: -kv[0][0]):
        if in_h % h or in_w % w or in_h // h != in_w // w:
            raise _fail(f"head level {h}x{w} is no whole stride of the {in_h}x{in_w} input", path)
        levels.append((in_h // h, h, w, ts))
    if reg_max:
        box_convs = set(g.head_convs(dfl_inputs)[0])  # the head convs that feed the DFL: the box branch
        return _v8_head(g, inputs[0].name, in_h, in_w, levels, reg_max, box_convs, path)
    return _v5_head(g, inputs[0].name, in_h, in_w, levels, path)


def _v8_head(g: _Graph, name: str, in_h: int, in_w: int, levels: list[tuple[int, int, int, list[str]]],
             reg_max: int, box_convs: set[str], path: str) -> YoloHead:
    out: list[Level] = []
    ncs: set[int] = set()
    for stride, h, w, ts in levels:
        # told apart by the graph (the box conv feeds the DFL), not by channel count: nc may be 4*reg_max
        box = [t for t in ts if t in box_convs]
        cls = [t for t in ts if t not in box_convs]
        if len(box) != 1 or len(cls) != 1 or g.shapes[box[0]][1] != 4 * reg_max:
            raise _fail(f"stride {stride}: expected one box conv of {4 * reg_max} channels feeding the DFL "
                        f"and one class conv, found {[g.shapes[t][1] for t in box]} channels feeding the "
                        f"DFL and {[g.shapes[t][1] for t in cls]} not", path)
        ncs.add(g.shapes[cls[0]][1])
        out.append(Level(stride, h, w, (box[0], cls[0]), (4 * reg_max, g.shapes[cls[0]][1])))
    if len(ncs) != 1:
        raise _fail(f"class convs differ in channels across levels: {sorted(ncs)}", path)
    return YoloHead("v8", name, in_h, in_w, ncs.pop(), tuple(out), reg_max=reg_max)


def _v5_head(g: _Graph, name: str, in_h: int, in_w: int, levels: list[tuple[int, int, int, list[str]]],
             path: str) -> YoloHead:
    final = [g.shapes.get(o.name, ()) for o in g.graph.output]
    if len(final) != 1 or len(final[0]) != 3 or final[0][2] < 6:
        raise _fail(f"no DFL (not a v8 head) and the output is {final[0] if final else '?'}, not the YOLOv5 "
                    "[1, N, 5+nc]", path)
    no = final[0][2]
    all_heads = {t for *_, ts in levels for t in ts}
    out, anchors = [], []
    for stride, h, w, ts in levels:
        c = g.shapes[ts[0]][1]
        if len(ts) != 1 or c % no:
            raise _fail(f"stride {stride}: expected one conv of na*{no} channels, found "
                        f"{[g.shapes[t][1] for t in ts]}", path)
        pairs = _anchor_pairs(g.downstream_constants(ts[0], all_heads - {ts[0]}), c // no)
        if pairs is None:
            raise _fail(f"stride {stride}: no anchor constant ({c // no} (w, h) pairs) in the decode", path)
        anchors.append(pairs)
        out.append(Level(stride, h, w, (ts[0],), (c,)))
    return YoloHead("v5", name, in_h, in_w, no - 5, tuple(out), anchors=tuple(anchors))
