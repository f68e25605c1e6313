"""Cut a YOLO graph after its per-level head convolutions and write the metadata to decode the raw heads.

    dla_build trim MODEL.onnx [--out X.onnx] [--meta-out X.meta.yaml] [--outputs a,b,c]

The decode at the end of an exported YOLO (DFL Reshape/Softmax, anchor grids, Div/Mul by strides, the
Concat of all levels, Sigmoid) holds layers the DLA cannot run, so a ``--buildDLAStandalone`` build fails.
Cut there, the graph is convolutions only and the host decodes (``yolov8_raw`` / ``yolov5_raw``).

Outputs of the trimmed graph, in ascending stride order:

- YOLOv8 / YOLO11 / YOLOv5u: two per level, ``box_s8, cls_s8, box_s16, cls_s16, ...``: the box conv's
  ``[1, 4*reg_max, H, W]`` DFL logits and the class conv's ``[1, nc, H, W]`` logits, exactly as the
  original convs compute them. They are not concatenated per level: a channel Concat would run on the DLA,
  but it adds a layer and a copy for nothing, and separate outputs keep the cut a pure extraction (no node
  added), so the trimmed graph computes bit for bit what the original does up to the cut.
- YOLOv5 (anchors): one per level, ``head_s8, head_s16, ...``: ``[1, na*(5+nc), H, W]`` (the layout of the
  package's own shipped model).

The metadata (``--meta-out``, default ``<out stem>.meta.yaml`` next to the trimmed ONNX, where the node and
``detect`` look for it) holds the input size and normalisation (ultralytics: RGB, x = pixel / 255, pad 114),
the decoder (kind, strides, reg_max or anchors read from the graph), the outputs and the class names from
the ONNX metadata ``names`` when present. With ``--outputs`` the cut is where you say and the outputs keep
their names; metadata is written when the head is still recognised.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.model_meta import class_names_from_onnx_metadata
from dla_infer_node.core.resources import metadata_for_model

ULTRALYTICS_INPUT = {"channel_order": "rgb", "mean": [0.0, 0.0, 0.0], "std": [255.0, 255.0, 255.0],
                     "pad_value": 114}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the exported YOLO ONNX (final-output graph)")
    parser.add_argument("--out", help="trimmed ONNX (default: MODEL_trimmed.onnx next to MODEL)")
    parser.add_argument("--meta-out", help="metadata YAML (default: <out stem>.meta.yaml next to --out)")
    parser.add_argument("--outputs", help="comma-separated tensor names to cut at, instead of the recognised "
                                          "head convolutions")


def _fail(detail: str, **params: Any) -> ModelError:
    return ModelError(detail, call="trim", params=params, stage="trim")


def trimmed_outputs(head: Any) -> list[tuple[str, str, tuple[int, ...]]]:
    """(tensor in the original graph, name in the trimmed graph, shape) in the trimmed graph's order."""
    out: list[tuple[str, str, tuple[int, ...]]] = []
    for lv in head.levels:
        kinds = ("box", "cls") if head.family == "v8" else ("head",)
        for kind, tensor, ch in zip(kinds, lv.tensors, lv.channels, strict=True):
            out.append((tensor, f"{kind}_s{lv.stride}", (1, ch, lv.height, lv.width)))
    return out


def _rename(model: Any, renames: dict[str, str]) -> None:
    """Rename tensors everywhere they are named (node inputs/outputs, graph outputs, value_info)."""
    for node in model.graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    for vi in list(model.graph.output) + list(model.graph.value_info):
        vi.name = renames.get(vi.name, vi.name)


def metadata_doc(head: Any, name: str, onnx_file: str, source: str,
                 outputs: list[tuple[str, tuple[int, ...]]], classes: tuple[str, ...]) -> dict[str, Any]:
    decoder: dict[str, Any] = {"kind": "yolov8_raw" if head.family == "v8" else "yolov5_raw",
                               "num_classes": head.num_classes,
                               "strides": [lv.stride for lv in head.levels]}
    if head.family == "v8":
        decoder["reg_max"] = head.reg_max
    else:
        # the metadata's flat form: per stride [w0, h0, w1, h1, ...] in input pixels
        decoder["anchors"] = [[round(v, 4) for pair in per for v in pair] for per in head.anchors]
    return {
        "name": name, "onnx": onnx_file, "trimmed_from": source,
        "input": {"name": head.input_name, "width": head.input_width, "height": head.input_height,
                  **ULTRALYTICS_INPUT},
        "decoder": decoder,
        "outputs": [{"name": n, "shape": list(s)} for n, s in outputs],
        "classes": list(classes) or [f"class{i}" for i in range(head.num_classes)],
    }


def trim(model_path: Path, out: Path, meta_out: Path | None, outputs: list[str] | None) -> dict[str, Any]:
    """Cut ``model_path``; returns what was done (for the summary). Raises ModelError on bad input."""
    import onnx
    import onnx.utils
    import yaml

    from dla_infer_node.dla_build.yolo_patterns import recognise  # imports onnx: only when a trim runs

    if not model_path.is_file():
        raise _fail("model file not found", model=str(model_path))
    try:
        model = onnx.load(str(model_path))
    except Exception as exc:  # protobuf DecodeError and friends: one family for the CLI
        raise _fail(f"not a readable ONNX file: {exc}", model=str(model_path)) from exc
    head = None
    try:
        head = recognise(model, str(model_path))
    except ModelError:
        if outputs is None:
            raise
    if outputs is None:
        assert head is not None
        plan = trimmed_outputs(head)
    else:
        known = {o for n in model.graph.node for o in n.output}
        missing = [o for o in outputs if o not in known]
        if missing:
            raise _fail(f"no tensor named {missing[0]!r} in the graph", model=str(model_path))
        plan = [(o, o, ()) for o in outputs]
    input_name = head.input_name if head else next(
        i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
    with tempfile.TemporaryDirectory() as tmp:
        cut = Path(tmp) / "cut.onnx"
        try:
            onnx.utils.extract_model(str(model_path), str(cut), [input_name], [p[0] for p in plan])
        except Exception as exc:
            raise _fail(f"onnx.utils.extract_model failed: {exc}", model=str(model_path)) from exc
        trimmed = onnx.load(str(cut))
    _rename(trimmed, {src: dst for src, dst, _ in plan if src != dst})
    del trimmed.metadata_props[:]
    trimmed.metadata_props.extend(model.metadata_props)  # keeps ultralytics' names, imgsz, stride...
    shapes = {o.name: tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in trimmed.graph.output}
    onnx.checker.check_model(trimmed)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(trimmed, str(out))
    result: dict[str, Any] = {"out": str(out), "outputs": [(dst, shapes.get(dst)) for _, dst, _ in plan],
                              "family": head.family if head else None, "meta": None}
    if head is None:
        return result
    names_text = {p.key: p.value for p in model.metadata_props}.get("names")
    classes = class_names_from_onnx_metadata(names_text) if names_text else ()
    if classes and len(classes) != head.num_classes:
        raise _fail(f"ONNX metadata names {len(classes)} classes but the head has {head.num_classes}",
                    model=str(model_path))
    meta_path = meta_out or metadata_for_model(out)
    doc = metadata_doc(head, out.name[:-5] if out.name.endswith(".onnx") else out.stem,
                       _relative(out, meta_path.parent), model_path.name,
                       [(dst, shapes[dst]) for _, dst, _ in plan], classes)
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result["meta"] = str(meta_path)
    result["classes_from_onnx"] = bool(classes)
    return result


def _relative(target: Path, folder: Path) -> str:
    try:
        return str(target.resolve().relative_to(folder.resolve()))
    except ValueError:
        return str(target.resolve())


def run(args: argparse.Namespace) -> int:
    model = Path(args.model)
    out = Path(args.out) if args.out else model.with_name(model.stem + "_trimmed.onnx")
    outputs = [o.strip() for o in args.outputs.split(",") if o.strip()] if args.outputs else None
    if outputs is not None and not outputs:
        raise _fail("--outputs names no tensor", outputs=args.outputs)
    if out.resolve() == model.resolve():
        raise _fail("--out would overwrite the input model", out=str(out))
    res = trim(model, out, Path(args.meta_out) if args.meta_out else None, outputs)
    kind = {"v8": "YOLOv8/YOLO11/YOLOv5u head (DFL)", "v5": "YOLOv5 anchor head", None: "given outputs"}
    print(f"trim: {kind[res['family']]}: wrote {res['out']}")
    for name, shape in res["outputs"]:
        print(f"  output {name} {list(shape) if shape else '?'}")
    if res["meta"]:
        note = "" if res.get("classes_from_onnx") else " (no 'names' in the ONNX metadata: classN names)"
        print(f"  metadata {res['meta']}{note}")
    else:
        print("  no metadata written: the head was not recognised; write it by hand (models/README.md)")
    return 0
