"""Read an ONNX graph the way a DLA build sees it: inputs, opset, and one verdict per node.

Verdicts (one consistent meaning, used by ``dla_build lint``):
- ``dla``: TensorRT runs the layer on the DLA (within every documented limit, see ``dla_rules``).
- ``folded``: computed at build time from constants (Constant, Shape of a static tensor, the Gather/Cast/
  Concat/... chains that only make shapes, a DequantizeLinear of int8 weights), a no-op the parser drops
  (Identity, Dropout), or a QuantizeLinear/DequantizeLinear of an activation, which a strongly typed
  (explicitly quantized) build fuses into the int8 layers around it; no layer.
- ``gpu-fallback``: a static-shaped layer the DLA cannot run; a build with ``--allowGPUFallback`` puts it
  on the GPU (a hybrid engine), so a ``--buildDLAStandalone`` build, which may hold DLA layers only, fails.
- ``forbids-standalone``: a hard violation no DLA build accepts as is: dynamic dimensions (on an input, or
  produced by a node whose output shape depends on data), batch > 1 without ``--batch``, sizes over the
  DLA's limits on an input, an input type the DLA cannot take, an opset TensorRT's parser does not read.
A model can become a standalone loadable only when every row is ``ok``, ``dla`` or ``folded``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dla_infer_node.core.errors import ModelError
from dla_infer_node.dla_build import dla_rules
from dla_infer_node.dla_build.dla_limits import NodeFacts, Shape

if TYPE_CHECKING:
    import onnx

DLA, FOLDED, FALLBACK, FORBIDS, OK = "dla", "folded", "gpu-fallback", "forbids-standalone", "ok"
BLOCKING = (FALLBACK, FORBIDS)
# ops whose output must not be treated as a build-time constant even when their inputs are
NON_DETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
# TensorRT's DLA runs FP16 or INT8 networks ("Working with DLA"); an fp32 input is built with --fp16/--int8
INPUT_TYPES = {"FLOAT", "FLOAT16", "INT8"}


@dataclass
class Row:
    name: str
    op: str
    verdict: str
    reason: str


def load(path: str | Path) -> onnx.ModelProto:
    """The model with inferred shapes; ModelError (one line) when the file is missing or not ONNX."""
    try:
        import onnx
    except ImportError as exc:  # the lint is a build tool: onnx is a development dependency
        raise ModelError("the onnx package is not installed", call="lint", hint="pip install onnx") from exc
    file = Path(path)
    if not file.is_file():
        raise ModelError("file not found", call="lint", params={"model": str(file)})
    try:
        model = onnx.load(str(file))
    except Exception as exc:  # onnx raises DecodeError and others on a non-ONNX file
        raise ModelError(f"not an ONNX model ({type(exc).__name__})", call="lint",
                         params={"model": str(file)}) from exc
    if not model.graph.node:
        raise ModelError("not an ONNX model (no graph nodes)", call="lint", params={"model": str(file)})
    return model


def _shape(value_info: Any) -> Shape | None:
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)


def check_inputs(model: onnx.ModelProto, batch: int | None) -> list[Row]:
    """Input rows; pins a dynamic batch to ``batch`` in the model when given (the build fixes it)."""
    import onnx

    initializers = {t.name for t in model.graph.initializer}
    rows = []
    for vi in (v for v in model.graph.input if v.name not in initializers):
        problems = []
        type_name = onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type)
        if type_name not in INPUT_TYPES:
            problems.append(f"input type {type_name}: the DLA runs FP16/INT8 networks (Working with DLA)")
        dims = list(vi.type.tensor_type.shape.dim)
        for axis, dim in enumerate(dims):
            if dim.HasField("dim_value"):
                continue
            label = dim.dim_param or "unnamed"
            if axis == 0 and batch is not None:
                dim.dim_value = batch  # the build pins the profile (min = opt = max) to this batch
            else:
                what = "batch dimension" if axis == 0 else f"dimension (axis {axis})"
                problems.append(f"dynamic {what} '{label}' on input '{vi.name}' ({dla_rules.GENERAL}: "
                                "no dynamic dimensions)")
        static = [d.dim_value for d in dims if d.HasField("dim_value")]
        if dims and dims[0].HasField("dim_value"):
            n = dims[0].dim_value
            if batch is not None and n != batch:
                problems.append(f"batch {n} on input '{vi.name}' but --batch {batch} was given")
            elif batch is None and n > 1:
                problems.append(f"batch {n} on input '{vi.name}' without --batch: a DLA loadable has one "
                                f"fixed batch; pass --batch {n} if that is meant")
            if n > dla_rules.MAX_BATCH:
                problems.append(f"batch {n} > {dla_rules.MAX_BATCH} ({dla_rules.GENERAL})")
        big = [d for d in static[1:] if d > dla_rules.MAX_DIM]
        if big:
            problems.append(f"dimension {big[0]} on input '{vi.name}' > {dla_rules.MAX_DIM} "
                            f"({dla_rules.GENERAL})")
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
        rows.append(Row(vi.name, "<input>", FORBIDS if problems else OK,
                        "; ".join(problems) or f"{type_name} {shape}: static, within the DLA's limits"))
    return rows


def check_opset(model: onnx.ModelProto) -> tuple[int, Row]:
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    lo, hi = dla_rules.OPSET_RANGE
    ok = lo <= opset <= hi
    reason = f"opset {opset} {'within' if ok else 'outside'} [{lo},{hi}] (TensorRT ONNX Opset Guide, 11.x)"
    return opset, Row("<model>", "<opset>", OK if ok else FORBIDS, reason)


def _evaluate(node: onnx.NodeProto, values: list[np.ndarray], opset: int) -> list[np.ndarray] | None:
    """Run one constant node with ONNX's reference evaluator; None when it cannot."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    try:
        inputs = [numpy_helper.from_array(v, f"in{i}") for i, v in enumerate(values)]
        names = [f"in{i}" if name else "" for i, name in enumerate(node.input)]
        outs = [f"out{i}" for i in range(len(node.output))]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        graph = helper.make_graph([helper.make_node(node.op_type, names, outs, domain=node.domain, **attrs)],
                                  "fold", [], [helper.make_empty_tensor_value_info(o) for o in outs],
                                  initializer=inputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, {})]
    except Exception:
        return None


def analyse(model: onnx.ModelProto, opset: int) -> list[Row]:
    """One row per node, in graph order."""
    from onnx import helper, numpy_helper, shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:
        raise ModelError(f"shape inference failed: {exc}".splitlines()[0], call="lint") from exc
    graph = inferred.graph
    shapes: dict[str, Shape | None] = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        shapes[vi.name] = _shape(vi)
    values: dict[str, np.ndarray | None] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for t in graph.initializer:
        shapes[t.name] = tuple(t.dims)
    consumers: dict[str, list[str]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node.op_type)

    rows = []
    for node in graph.node:
        name, op = node.name or f"{node.op_type}:{node.output[0]}", node.op_type
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        real_inputs = [i for i in node.input if i]
        const = [i in values for i in node.input]
        in_shapes = [shapes.get(i) for i in node.input]
        out_shapes = [shapes.get(o) for o in node.output]
        static_in = bool(in_shapes) and all(None not in s for s in in_shapes if s is not None)
        if op == "Constant":
            values[node.output[0]] = numpy_helper.to_array(attrs["value"]) if "value" in attrs else None
            rows.append(Row(name, op, FOLDED, "a build-time constant"))
            continue
        if op == "Shape" and static_in and in_shapes[0] is not None:
            values[node.output[0]] = np.asarray(in_shapes[0], dtype=np.int64)
            rows.append(Row(name, op, FOLDED, "shape of a static tensor: a build-time constant"))
            continue
        if all(i in values for i in real_inputs) and op not in NON_DETERMINISTIC:
            known = [values[i] for i in real_inputs]
            out = _evaluate(node, [v for v in known if v is not None], opset) \
                if all(v is not None for v in known) else None
            for index, out_name in enumerate(node.output):
                values[out_name] = out[index] if out is not None and index < len(out) else None
            rows.append(Row(name, op, FOLDED, "all inputs are build-time constants: folded by the builder"))
            continue
        if op in dla_rules.NO_OPS:
            rows.append(Row(name, op, FOLDED, "a pass-through: the ONNX parser builds no layer"))
            continue
        if node.domain not in ("", "ai.onnx"):
            rows.append(Row(name, op, FALLBACK, f"custom domain '{node.domain}': a plugin, and there is no "
                            "plugin registry for DLA standalone (API EngineCapability::kDLA_STANDALONE)"))
            continue
        dynamic = [o for o, s in zip(node.output, out_shapes, strict=False) if s is not None and None in s]
        if dynamic and all(s is not None and None not in s for s in in_shapes if s is not None):
            rows.append(Row(name, op, FORBIDS, f"output '{dynamic[0]}' has a data-dependent shape "
                            f"({dla_rules.GENERAL}: no dynamic dimensions)"))
            continue
        facts = NodeFacts(op, attrs, in_shapes, out_shapes, [values.get(i) for i in node.input], const,
                          [c for o in node.output for c in consumers.get(o, [])], opset)
        if op in dla_rules.QDQ_OPS:  # explicit quantization: fused into the int8 layers, no layer of its own
            problems = dla_rules.check_qdq(facts)
            rows.append(Row(name, op, FORBIDS if problems else FOLDED, "; ".join(problems) or
                            "explicit int8 quantization: TensorRT fuses the Q/DQ pair into the int8 layers "
                            "around it (no layer of its own)"))
            continue
        on_dla, reason = dla_rules.judge(facts)
        rows.append(Row(name, op, DLA if on_dla else FALLBACK, reason))
    return rows


def lint(path: str | Path, batch: int | None = None) -> dict[str, Any]:
    """The whole report: rows (inputs, opset, nodes), counts, whether a standalone build can succeed."""
    model = load(path)
    input_rows = check_inputs(model, batch)
    opset, opset_row = check_opset(model)
    node_rows = analyse(model, opset)
    rows = [*input_rows, opset_row, *node_rows]
    counts = {v: sum(r.verdict == v for r in node_rows) for v in (DLA, FOLDED, FALLBACK, FORBIDS)}
    offending = [r.name for r in rows if r.verdict in BLOCKING]
    return {"model": str(path), "opset": opset, "batch": batch, "rows": [asdict(r) for r in rows],
            "counts": counts, "standalone_ok": not offending, "offending": offending}
