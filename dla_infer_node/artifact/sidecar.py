"""The DLA artifact: a loadable plus its sidecar ``*.loadable.yaml`` of compile-time facts.

A loadable (``trtexec --buildDLAStandalone``) does not say how it was built, which int8 scales its
tensors use or how to decode its outputs, so a sidecar file next to it does. Sidecar keys::

    artifact_version: 1
    loadable: model.loadable          # optional; relative to the sidecar (else the path given at startup)
    loadable_sha256: <hex>            # optional; checked before any byte reaches the driver
    emulated: false                   # true only for DLA EMULATOR test artifacts
    source_model: {path: ../models/model.onnx, sha256: <hex>, revision: <git/tag>}  # path: from the sidecar
    build:
      tool: trtexec
      tensorrt_version: "10.3.0"
      command: "trtexec --onnx=model.onnx --useDLACore=0 --int8 --buildDLAStandalone
                --inputIOFormats=int8:dla_hwc4 --outputIOFormats=fp16:chw16 --saveEngine=model.loadable"
      working_directory: /opt/robot/models  # where the command ran (its paths are relative to it)
      built_from: {path: ..., sha256: ...}       # dla_build records file paths relative to the sidecar,
      precision_source: {kind: ..., path: ...}   # so the folder can be copied with its loadable
    tensors:
      inputs:  [{name: images, format: hwc4, dtype: int8, shape: [1, 3, 640, 640], scale: 0.00787}]
      outputs: [{name: p3, format: chw16, dtype: fp16, shape: [1, 255, 80, 80]}, ...]
    model: {...}                      # the ModelMetadata mapping (input, decoder, outputs, classes, ...)
    # or  metadata: model.meta.yaml   # the same, as a file relative to the sidecar

Everything here is validated at startup (``ModelError`` naming the file and key) and, once the loadable is
loaded, checked against the descriptors it reports (:func:`check_descriptors`). :meth:`Artifact.summary`
is what the node logs as "artifact", separately from its runtime parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the loadable's file checks live in loadable_file; re-exported here, where callers have always found them
from dla_infer_node.artifact.loadable_file import MAX_LOADABLE_BYTES as MAX_LOADABLE_BYTES
from dla_infer_node.artifact.loadable_file import check_loadable_file as check_loadable_file
from dla_infer_node.artifact.loadable_file import read_checked
from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.model_meta import ModelMetadata, load_metadata, parse_metadata
from dla_infer_node.core.output_shapes import check_output_shapes
from dla_infer_node.core.yaml_file import read_yaml

ARTIFACT_VERSION = 1
FORMATS = ("linear", "hwc4", "chw16", "chw32")
DTYPES = ("fp16", "int8")
# trtexec --inputIOFormats / --outputIOFormats spellings -> tensor_format names
TRTEXEC_FORMATS = {"dla_linear": "linear", "dla_hwc4": "hwc4", "chw16": "chw16", "chw32": "chw32"}
INPUT_FORMATS = FORMATS
OUTPUT_FORMATS = ("linear", "chw16", "chw32")


@dataclass(frozen=True)
class TensorFacts:
    """One tensor as the artifact declares it (``shape`` is the model's logical shape)."""

    name: str
    format: str
    dtype: str
    shape: tuple[int, ...]
    scale: float | None = None


@dataclass(frozen=True)
class Artifact:
    sidecar_path: Path
    loadable_path: Path
    loadable_sha256: str | None
    emulated: bool
    source_model: Mapping[str, Any]
    build: Mapping[str, Any]
    inputs: tuple[TensorFacts, ...]
    outputs: tuple[TensorFacts, ...]
    metadata: ModelMetadata
    extra: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Plain data for logs and the deployment record (compile-time facts only)."""
        return {
            "sidecar": str(self.sidecar_path),
            "loadable": str(self.loadable_path),
            "loadable_sha256": self.loadable_sha256,
            "emulated": self.emulated,
            "source_model": dict(self.source_model),
            "build": dict(self.build),
            "inputs": [_facts_dict(t) for t in self.inputs],
            "outputs": [_facts_dict(t) for t in self.outputs],
            "model": {"name": self.metadata.name, "decoder": self.metadata.decoder.kind,
                      "classes": list(self.metadata.classes),
                      "input": [self.metadata.input.width, self.metadata.input.height]},
        }


def _facts_dict(t: TensorFacts) -> dict[str, Any]:
    d: dict[str, Any] = {"name": t.name, "format": t.format, "dtype": t.dtype, "shape": list(t.shape)}
    if t.scale is not None:
        d["scale"] = t.scale
    return d


def _err(path: Path, key: str, detail: str) -> ModelError:
    return ModelError(f"{key}: {detail}", call="load_artifact", params={"path": str(path), "key": key})


def _typed(ok: bool, path: Path, key: str, value: Any, allowed: str) -> None:
    """One-line error naming file, key, value and what is allowed, when ``ok`` is false."""
    if not ok:
        raise _err(path, key, f"{value!r} is invalid: allowed {allowed}")


def _tensor(doc: Any, key: str, path: Path, allowed_formats: Sequence[str]) -> TensorFacts:
    if not isinstance(doc, Mapping):
        raise _err(path, key, "must be a mapping with name, format, dtype, shape")
    for k in ("name", "format", "dtype", "shape"):
        if k not in doc:
            raise _err(path, f"{key}.{k}", "missing")
    _typed(isinstance(doc["name"], str) and bool(doc["name"]), path, f"{key}.name", doc["name"],
           "a non-empty string")
    fmt, dtype = doc["format"], doc["dtype"]
    if fmt not in allowed_formats:
        raise _err(path, f"{key}.format", f"{fmt!r} not in {tuple(allowed_formats)}")
    if dtype not in DTYPES:
        raise _err(path, f"{key}.dtype", f"{dtype!r} not in {DTYPES}")
    if (fmt, dtype) in (("chw16", "int8"), ("chw32", "fp16")):
        raise _err(path, f"{key}.format", f"{fmt} cannot hold {dtype} (chw16 is fp16, chw32 is int8)")
    dims = doc["shape"]
    _typed(isinstance(dims, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in dims),
           path, f"{key}.shape", dims, "a list of integers")
    shape = tuple(dims)
    if not 1 <= len(shape) <= 4 or min(shape) < 1:
        raise _err(path, f"{key}.shape", f"{shape} must have 1..4 positive dims")
    scale = doc.get("scale")
    if dtype == "int8":
        if scale is None:
            raise _err(path, f"{key}.scale", "missing: an int8 tensor needs its calibration scale "
                                             "(from the calibration cache), it cannot be guessed")
        _typed(isinstance(scale, (int, float)) and not isinstance(scale, bool), path, f"{key}.scale", scale,
               "a positive number")
        scale = float(scale)
        if not (scale > 0 and scale < float("inf")):
            raise _err(path, f"{key}.scale", f"must be positive and finite, got {scale}")
    else:
        scale = None
    return TensorFacts(str(doc["name"]), fmt, dtype, shape, scale)


_IOFMT = re.compile(r"--(input|output)IOFormats[= ](\S+)")


def _check_build(build: Mapping[str, Any], inputs: Sequence[TensorFacts], outputs: Sequence[TensorFacts],
                 path: Path) -> None:
    """The trtexec command line must describe a standalone DLA loadable whose io formats match."""
    cmd = build.get("command")
    if not cmd:
        return  # not recorded: nothing to cross-check (the descriptors still are)
    _typed(isinstance(cmd, (str, list)), path, "build.command", cmd, "a string or a list of strings")
    cmd = " ".join(str(c) for c in cmd) if isinstance(cmd, (list, tuple)) else str(cmd)
    if "--buildDLAStandalone" not in cmd:
        raise _err(path, "build.command", "lacks --buildDLAStandalone: without it trtexec writes a TensorRT "
                                          "engine, which cuDLA cannot load")
    if "--useDLACore" not in cmd:
        raise _err(path, "build.command", "lacks --useDLACore=N: the network was not built for a DLA")
    for side, tensors in (("input", inputs), ("output", outputs)):
        specs = [m.group(2) for m in _IOFMT.finditer(cmd) if m.group(1) == side]
        if not specs:
            continue
        entries = ",".join(specs).split(",")
        if len(entries) != len(tensors):
            raise _err(path, "build.command", f"--{side}IOFormats lists {len(entries)} formats, the sidecar "
                                              f"{len(tensors)} {side}s")
        for t, entry in zip(tensors, entries, strict=True):
            dtype, _, fmt = entry.partition(":")
            if dtype != t.dtype or TRTEXEC_FORMATS.get(fmt) != t.format:
                raise _err(path, "build.command", f"--{side}IOFormats entry {entry!r} disagrees with "
                                                  f"{t.name}: {t.dtype}:{t.format}")


def parse_artifact(doc: Any, sidecar: Path, loadable: str | Path | None = None) -> Artifact:
    """Validate a sidecar mapping. ``loadable`` (the configured path) wins over the sidecar's key."""
    if not isinstance(doc, Mapping):
        raise _err(sidecar, "(top)", "the sidecar must be a YAML mapping")
    version = doc.get("artifact_version", ARTIFACT_VERSION)
    if version != ARTIFACT_VERSION:
        raise _err(sidecar, "artifact_version",
                   f"{version!r} unsupported (this package reads {ARTIFACT_VERSION})")
    tens: Any = doc.get("tensors")
    _typed(isinstance(tens, Mapping), sidecar, "tensors", tens, "a mapping with 'inputs' and 'outputs'")
    for side in ("inputs", "outputs"):
        _typed(isinstance(tens.get(side), list) and bool(tens[side]), sidecar, f"tensors.{side}",
               tens.get(side), "a non-empty list of tensor mappings")
    inputs = tuple(_tensor(t, f"tensors.inputs[{i}]", sidecar, INPUT_FORMATS)
                   for i, t in enumerate(tens["inputs"]))
    outputs = tuple(_tensor(t, f"tensors.outputs[{i}]", sidecar, OUTPUT_FORMATS)
                    for i, t in enumerate(tens["outputs"]))
    if len(inputs) != 1:
        raise _err(sidecar, "tensors.inputs", f"{len(inputs)} inputs; the detector feeds exactly one image")
    build = doc.get("build") or {}
    if not isinstance(build, Mapping):
        raise _err(sidecar, "build", "must be a mapping")
    _check_build(build, inputs, outputs, sidecar)
    for key in ("loadable", "metadata"):
        _typed(key not in doc or (isinstance(doc[key], str) and bool(doc[key])), sidecar, key, doc.get(key),
               "a path (a non-empty string)")
    _typed(isinstance(doc.get("emulated", False), bool), sidecar, "emulated", doc.get("emulated"),
           "true or false")
    if "model" in doc:
        _typed(isinstance(doc["model"], Mapping), sidecar, "model", doc["model"], "a mapping (the metadata)")
        metadata = parse_metadata(doc["model"], sidecar)
    elif "metadata" in doc:
        meta_path = Path(doc["metadata"])
        metadata = load_metadata(meta_path if meta_path.is_absolute() else sidecar.parent / meta_path)
    else:
        raise _err(sidecar, "model",
                   "missing: give the model metadata inline ('model') or as a file ('metadata')")
    check_against_metadata(inputs, outputs, metadata, sidecar)
    if loadable is not None and str(loadable):
        lpath = Path(loadable)
    elif doc.get("loadable"):
        lp = Path(str(doc["loadable"]))
        lpath = lp if lp.is_absolute() else sidecar.parent / lp
    else:
        raise _err(sidecar, "loadable", "no loadable path configured and none in the sidecar")
    source = doc.get("source_model") or {}
    if not isinstance(source, Mapping):
        raise _err(sidecar, "source_model", "must be a mapping (path, sha256, revision)")
    sha = doc.get("loadable_sha256")
    if sha is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", str(sha)):
        raise _err(sidecar, "loadable_sha256", "must be 64 hex digits")
    known = {"artifact_version", "tensors", "build", "model", "metadata", "loadable", "source_model",
             "loadable_sha256", "emulated"}
    return Artifact(sidecar_path=sidecar, loadable_path=lpath, loadable_sha256=str(sha) if sha else None,
                    emulated=bool(doc.get("emulated", False)), source_model=dict(source), build=dict(build),
                    inputs=inputs, outputs=outputs, metadata=metadata,
                    extra={k: v for k, v in doc.items() if k not in known})


def check_against_metadata(inputs: Sequence[TensorFacts], outputs: Sequence[TensorFacts],
                           metadata: ModelMetadata, path: Path) -> None:
    """The artifact's tensors must be the model's: input size/channels, output names and shapes."""
    inp = inputs[0]
    want = (1, 3, metadata.input.height, metadata.input.width)
    if _as4(inp.shape) != want:
        raise _err(path, "tensors.inputs[0].shape", f"{list(inp.shape)} but the model input is {list(want)}")
    meta_out = {o.name: o.shape for o in metadata.outputs}
    names = [o.name for o in outputs]
    if sorted(names) != sorted(meta_out):
        raise _err(path, "tensors.outputs", f"names {names} differ from the model outputs {list(meta_out)}")
    for o in outputs:
        if tuple(o.shape) != tuple(meta_out[o.name]):
            raise _err(path, f"tensors.outputs[{o.name}].shape",
                       f"{list(o.shape)} but the model says {list(meta_out[o.name])}")
    check_output_shapes(metadata)  # the class list must fit these shapes (one line, at startup)


def _as4(shape: Sequence[int]) -> tuple[int, ...]:
    s = tuple(int(v) for v in shape)
    return s + (1,) * (4 - len(s))


def load_artifact(sidecar: str | Path, loadable: str | Path | None = None) -> Artifact:
    """Read and validate a sidecar file; problems are :class:`ModelError` naming file and key."""
    p = Path(sidecar)
    if not p.is_file():
        raise ModelError("artifact sidecar not found", call="load_artifact", params={"path": str(p)},
                         hint="the sidecar (<loadable>.yaml) records int8 scales and io formats; "
                              "write it when building the loadable")
    try:
        doc = read_yaml(p)
    except ValueError as exc:
        raise ModelError(f"cannot read sidecar: {exc}", call="load_artifact",
                         params={"path": str(p)}) from exc
    return parse_artifact(doc, p, loadable)


def default_sidecar(loadable: str | Path) -> Path:
    """``model.loadable`` -> ``model.loadable.yaml``."""
    p = Path(loadable)
    return p.with_name(p.name + ".yaml")


def read_loadable(artifact: Artifact, max_bytes: int = MAX_LOADABLE_BYTES) -> bytes:
    """The loadable's bytes, after the file checks and (when the sidecar has one) the sha256 check."""
    return read_checked(artifact.loadable_path, artifact.loadable_sha256, artifact.sidecar_path, max_bytes)
