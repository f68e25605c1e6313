"""Write a loadable's sidecar (``X.loadable.yaml``): the build facts ``artifact.sidecar`` reads back.

    dla_build sidecar X.loadable --onnx MODEL.onnx --trt-version V --precision fp16|int8
                      [--input-format F] [--output-format F] [--calibration-cache C] [--qdq-onnx Q]
                      [--built-from ONNX] [--command CMD] [--revision R] [--metadata META] [--dla-core N]

``dla_build compile`` calls :func:`write_sidecar` after trtexec; this subcommand does the same for a
loadable built by hand (without ``--command`` it records the command ``compile`` would have run). Recorded:
io formats, dtypes, int8 scales (from the calibration cache or the Q/DQ ONNX), shapes, the exact command,
the TensorRT version and line, the precision source with its sha256, sha256 of the ONNX and the loadable,
the model revision (``git describe`` of the model's folder unless ``--revision``) and the model metadata.
File paths are recorded relative to the sidecar's folder, so a folder copied with its loadable resolves.
The written file is read back with ``load_artifact`` before this returns: a sidecar the node would refuse
is never left behind.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dla_infer_node.artifact import trt_support
from dla_infer_node.artifact.sidecar import TRTEXEC_FORMATS, default_sidecar, load_artifact
from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.model_meta import load_metadata
from dla_infer_node.core.yaml_file import read_yaml
from dla_infer_node.dla_build import onnx_facts
from dla_infer_node.dla_build.build_plan import RECORD, BuildPlan, PrecisionSource, plan_build

EMULATOR_MAGIC = b"DLAEMU1\0"  # emulator/make_loadable.py's header: a test artifact, not a DLA loadable


def git_revision(folder: Path) -> str:
    """``git describe --always --dirty --tags`` of the folder, or 'unknown' outside a git work tree."""
    try:
        proc = subprocess.run(["git", "-C", str(folder), "describe", "--always", "--dirty", "--tags"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


def model_mapping(meta_path: Path) -> dict[str, Any]:
    """The metadata inline, made independent of its folder: class names inline, no relative file keys."""
    meta = load_metadata(meta_path)  # validates it
    doc = dict(read_yaml(meta_path))  # the file load_metadata just read: the same bounded reader
    doc["classes"] = list(meta.classes)
    for key in ("onnx", "labels"):  # relative to the metadata file, meaningless next to the loadable
        doc.pop(key, None)
    return doc


def relative_to(path: Path, folder: Path) -> str:
    """``path`` as the sidecar records it: relative to the sidecar's folder, so that a sidecar copied with its
    loadable (and the files beside them) still resolves; absolute when they share no root (Windows drives)."""
    try:
        return os.path.relpath(path.resolve(), folder.resolve())
    except ValueError:
        return str(path.resolve())


def _recorded_file(path: Path, folder: Path) -> dict[str, str]:
    """Path (relative to the sidecar) and sha256 of a build input; one line when it is missing."""
    if not path.is_file():
        raise ModelError("build input not found", call="write_sidecar", params={"path": str(path)})
    return {"path": relative_to(path, folder), "sha256": onnx_facts.sha256_file(path)}


def _source_record(source: PrecisionSource, folder: Path) -> dict[str, Any]:
    if source.path is None:
        return {"kind": source.kind, "path": None, "sha256": None}
    return {"kind": source.kind, **_recorded_file(source.path, folder)}


def _scale_for(name: str, scales: Mapping[str, float], source: PrecisionSource) -> float:
    if name in scales:
        return float(scales[name])
    raise ModelError(f"int8 tensor {name!r} has no scale in the {source.kind.replace('_', ' ')}",
                     call="write_sidecar", params={"source": str(source.path)},
                     hint="an int8 io tensor's scale must come from calibration; use fp16 io for it instead")


def build_doc(*, loadable: Path, onnx: Path, built_from: Path, tensorrt_version: str, precision: str,
              input_formats: Sequence[tuple[str, str]], output_formats: Sequence[tuple[str, str]],
              command: str, source: PrecisionSource, revision: str | None, meta_path: Path,
              dla_core: int) -> dict[str, Any]:
    meta = model_mapping(meta_path)
    line = trt_support.line_for(tensorrt_version)
    scales: dict[str, float] = {}
    if source.kind == "calibration_cache" and source.path:
        scales = onnx_facts.cache_scales(source.path)
    elif source.kind == "qdq_onnx" and source.path:
        scales = onnx_facts.qdq_scales(source.path)
    inp = meta["input"]
    in_shapes = [[1, 3, int(inp["height"]), int(inp["width"])]]
    in_names = [str(inp["name"])]
    out_names = [str(o["name"]) for o in meta["outputs"]]
    out_shapes = [list(o["shape"]) for o in meta["outputs"]]

    def facts(names: Sequence[str], shapes: Sequence[Any], fmts: Sequence[tuple[str, str]]) -> list[Any]:
        rows = []
        for name, shape, (dtype, fmt) in zip(names, shapes, fmts, strict=True):
            row: dict[str, Any] = {"name": name, "format": TRTEXEC_FORMATS[fmt], "dtype": dtype,
                                   "shape": [int(v) for v in shape]}
            if dtype == "int8":
                row["scale"] = _scale_for(name, scales, source)
            rows.append(row)
        return rows

    data = loadable.read_bytes()
    folder = loadable.parent
    return {
        "artifact_version": 1,
        "loadable": loadable.name,
        "loadable_sha256": hashlib.sha256(data).hexdigest(),
        "emulated": data.startswith(EMULATOR_MAGIC),
        "source_model": {**_recorded_file(onnx, folder),
                         "revision": revision or git_revision(onnx.resolve().parent)},
        "build": {"tool": "trtexec", "tensorrt_version": trt_support.format_version(
                      trt_support.parse_version(tensorrt_version)),
                  "tensorrt_line": line, "precision": precision, "dla_core": int(dla_core),
                  "built_from": _recorded_file(built_from, folder),
                  "precision_source": _source_record(source, folder), "command": command,
                  "working_directory": str(Path.cwd())},  # where the command's relative paths start
        "tensors": {"inputs": facts(in_names, in_shapes, input_formats),
                    "outputs": facts(out_names, out_shapes, output_formats)},
        "model": meta,
    }


def sidecar_doc(plan: BuildPlan, args: argparse.Namespace, loadable: Path) -> dict[str, Any]:
    command = getattr(args, "trtexec_command", None) or plan.command
    return build_doc(loadable=loadable, onnx=plan.onnx, built_from=plan.built_from,
                     tensorrt_version=plan.version, precision=plan.precision, input_formats=plan.inputs,
                     output_formats=plan.outputs, command=command, source=plan.source,
                     revision=args.revision, meta_path=plan.meta, dla_core=args.dla_core)


def write_sidecar(doc: Mapping[str, Any], loadable: Path) -> Path:
    """Write ``<loadable>.yaml`` and prove the node can read it (``load_artifact``), else remove it."""
    path = default_sidecar(loadable)
    path.write_text(yaml.safe_dump(dict(doc), sort_keys=False), encoding="utf-8")
    try:
        load_artifact(path)
    except ModelError:
        path.unlink(missing_ok=True)
        raise
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("loadable", help="the loadable trtexec wrote (--saveEngine)")
    parser.add_argument("--onnx", required=True, help="the model it was compiled from (fp32 source)")
    parser.add_argument("--trt-version", required=True, help="TensorRT that built it, e.g. 10.3 or 11.4.1")
    parser.add_argument("--precision", choices=("fp16", "int8"), required=True)
    parser.add_argument("--input-format", help="e.g. int8:dla_hwc4 (default from precision)")
    parser.add_argument("--output-format", help="trtexec spelling, e.g. fp16:chw16 (one, or one per output)")
    parser.add_argument("--calibration-cache", help="10.x int8: the cache the loadable was built with")
    parser.add_argument("--qdq-onnx", help="11.x int8: the Q/DQ ONNX the loadable was built from")
    parser.add_argument("--built-from", help="the ONNX trtexec read, when not --onnx (e.g. an fp16 ONNX)")
    parser.add_argument("--command", dest="trtexec_command",
                        help="the exact trtexec command (default: the one compile would run)")
    parser.add_argument("--revision", help="model revision (default: git describe of the model's folder)")
    parser.add_argument("--metadata", help="model metadata YAML (default: <model>.meta.yaml)")
    parser.add_argument("--dla-core", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    loadable = Path(args.loadable)
    if not loadable.is_file():
        raise ModelError("loadable not found", call="dla_build sidecar", params={"path": str(loadable)})
    plan = plan_build(args, RECORD)
    path = write_sidecar(sidecar_doc(plan, args, loadable), loadable)
    print(f"sidecar: {path}")
    return 0
