"""DLA EMULATOR (test infrastructure): write emulated loadables (and their artifact sidecars).

An emulated loadable is NOT a DLA loadable: only the emulator's libcudla.so.1 (emulator/build.sh) can
load it. Layout of the file (little-endian), as parsed by emulator/emu_format.c:

* header, 32 bytes: ``b"DLAEMU1\\0"``, u32 version=1, u32 program (0 echo, 1 oracle), u32 num_inputs,
  u32 num_outputs, u32 params_size, u32 reserved
* one 192-byte record per tensor (inputs first): name[96], u64 size, n, c, h, w, u8 data_format,
  data_type, data_category, pixel_format, pixel_mapping, emu_format (0 linear, 1 hwc4, 2 chw16,
  3 chw32), emu_dtype (0 fp16, 1 int8), pad, u32 stride[8] (bytes: atom, line, surface, batch, 0...),
  f32 scale, 12 reserved bytes
* oracle params: u32 out_kind (0 raw heads, 1 final), num_classes, num_anchors, bgr, tolerance,
  min_size; f32 mean[3], std[3], logit_pos, logit_neg; u8 colours[nc][4] (R, G, B, 0); for raw heads
  u32 strides[num_outputs] and f32 anchors[num_outputs][num_anchors][2].
* network params (:func:`network_params`): u32 precision (0 fp16, 1 int8), u8 sha256[32] of the embedded
  ONNX, u64 onnx_size, the ONNX bytes (the "compiled" network: fp16-emulating or QDQ, see
  emulator/network_build.py). The emulator hands the whole loadable to the host callback
  (emulator/network_host.py), which runs it with ONNX Runtime.

Strides are computed here from the layout rules of the DLA formats, independently of
``dla_infer_node.core.tensor_format``, so the tests cross-check the package's layout code.
The descriptor codes (data_format / data_type) follow TensorRT's ``TensorFormat`` / ``DataType``
enum values as an emulator convention; the backend does not interpret them.
"""

from __future__ import annotations

import argparse
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAGIC = b"DLAEMU1\0"
VERSION = 1
PROGRAMS = {"echo": 0, "oracle": 1, "network": 2}
NETWORK_PRECISION = {"fp16": 0, "int8": 1}
EMU_FORMAT = {"linear": 0, "hwc4": 1, "chw16": 2, "chw32": 3}
EMU_DTYPE = {"fp16": 0, "int8": 1}
DESC_FORMAT_CODE = {"linear": 9, "hwc4": 10, "chw16": 4, "chw32": 5}  # TensorRT TensorFormat values
DESC_TYPE_CODE = {"fp16": 1, "int8": 2}  # TensorRT DataType values
ELEM = {"fp16": 2, "int8": 1}
TRTEXEC_FORMAT = {"linear": "dla_linear", "hwc4": "dla_hwc4", "chw16": "chw16", "chw32": "chw32"}


def _up(v: int, m: int) -> int:
    return -(-v // m) * m


def dense_strides(fmt: str, dtype: str, c: int, h: int, w: int, line_pad: int = 0) -> tuple[list[int], int]:
    """(atom, line, surface, batch) in bytes and the per-batch size; ``line_pad`` adds slack per row."""
    e = ELEM[dtype]
    if fmt == "linear":
        atom, line = e, _up(w, 64 // e) * e + line_pad
        surface = line * h
        return [atom, line, surface, surface * c], surface * c
    if fmt == "hwc4":
        cp = 1 if c == 1 else 4
        atom, line = e * cp, _up(w, 64 // cp // e) * e * cp + line_pad
        return [atom, line, line * h, line * h], line * h
    v = 16 if fmt == "chw16" else 32
    atom, line = e * v, w * e * v + line_pad
    surface = line * h
    return [atom, line, surface, surface * -(-c // v)], surface * -(-c // v)


@dataclass
class EmuTensor:
    name: str
    format: str
    dtype: str
    shape: tuple[int, int, int, int]  # n, c, h, w as the descriptor reports them (c may be padded)
    scale: float | None = None
    line_pad: int = 0
    extra_size: int = 0  # slack bytes at the end of the buffer

    def strides_and_size(self) -> tuple[list[int], int]:
        n, c, h, w = self.shape
        s, per = dense_strides(self.format, self.dtype, c, h, w, self.line_pad)
        return s, per * n + self.extra_size

    def record(self) -> bytes:
        n, c, h, w = self.shape
        strides, size = self.strides_and_size()
        name = self.name.encode()[:80].ljust(96, b"\0")
        out = name + struct.pack("<5Q", size, n, c, h, w)
        out += bytes([DESC_FORMAT_CODE[self.format], DESC_TYPE_CODE[self.dtype], 0, 0, 0,
                      EMU_FORMAT[self.format], EMU_DTYPE[self.dtype], 0])
        out += struct.pack("<8I", *(strides + [0] * (8 - len(strides))))
        out += struct.pack("<f", float(self.scale or 0.0)) + b"\0" * 12
        assert len(out) == 192
        return out


@dataclass
class OracleParams:
    colours: Sequence[tuple[int, int, int]]
    out_kind: str = "raw"  # "raw" (YOLOv5 heads, one output per stride) or "final" ([1, N, 5+nc])
    strides: Sequence[int] = ()
    anchors: Sequence[Sequence[tuple[float, float]]] = ()
    channel_order: str = "rgb"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (255.0, 255.0, 255.0)
    tolerance: int = 3
    min_size: int = 4
    logit_pos: float = 4.0
    logit_neg: float = -4.0

    def pack(self, num_outputs: int) -> bytes:
        na = len(self.anchors[0]) if self.anchors else 0
        out = struct.pack("<6I", 0 if self.out_kind == "raw" else 1, len(self.colours), na,
                          1 if self.channel_order == "bgr" else 0, self.tolerance, self.min_size)
        out += struct.pack("<8f", *self.mean, *self.std, self.logit_pos, self.logit_neg)
        for r, g, b in self.colours:
            out += bytes([r, g, b, 0])
        if self.out_kind == "raw":
            out += struct.pack(f"<{num_outputs}I", *self.strides)
            for per_stride in self.anchors:
                for aw, ah in per_stride:
                    out += struct.pack("<2f", aw, ah)
        return out


def network_params(precision: str, onnx_bytes: bytes) -> bytes:
    """Params of a ``network`` loadable: the embedded ONNX the emulated DLA runs, named by its sha256."""
    import hashlib

    return (struct.pack("<I", NETWORK_PRECISION[precision]) + hashlib.sha256(onnx_bytes).digest()
            + struct.pack("<Q", len(onnx_bytes)) + onnx_bytes)


def build_loadable(program: str, inputs: Sequence[EmuTensor], outputs: Sequence[EmuTensor],
                   oracle: OracleParams | None = None, params: bytes = b"") -> bytes:
    if program == "oracle" and oracle is not None:
        params = oracle.pack(len(outputs))
    head = MAGIC + struct.pack("<6I", VERSION, PROGRAMS[program], len(inputs), len(outputs), len(params), 0)
    return head + b"".join(t.record() for t in (*inputs, *outputs)) + params


@dataclass
class EmulatedArtifact:
    loadable: Path
    sidecar: Path
    doc: dict[str, Any] = field(default_factory=dict)


def write_artifact(directory: str | Path, stem: str, program: str, inputs: Sequence[EmuTensor],
                   outputs: Sequence[EmuTensor], model: dict[str, Any], oracle: OracleParams | None = None,
                   logical_shapes: dict[str, Sequence[int]] | None = None, params: bytes = b"",
                   source_model: dict[str, Any] | None = None) -> EmulatedArtifact:
    """Write ``<stem>.loadable`` and ``<stem>.loadable.yaml`` (the sidecar that artifact.sidecar reads).

    ``model`` is the ModelMetadata mapping; ``logical_shapes`` the model's shape per tensor name when it
    differs from the descriptor's (padded channels, rank-3 outputs); ``params`` the program's params
    (network); ``source_model`` the sidecar's record of the ONNX the loadable was "compiled" from.
    """
    import hashlib

    import yaml

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    blob = build_loadable(program, inputs, outputs, oracle, params)
    loadable = d / f"{stem}.loadable"
    loadable.write_bytes(blob)
    shapes = logical_shapes or {}

    def facts(t: EmuTensor) -> dict[str, Any]:
        f: dict[str, Any] = {"name": t.name, "format": t.format, "dtype": t.dtype,
                             "shape": list(shapes.get(t.name, t.shape))}
        if t.dtype == "int8":
            f["scale"] = t.scale
        return f

    iofmt_in = ",".join(f"{t.dtype}:{TRTEXEC_FORMAT[t.format]}" for t in inputs)
    iofmt_out = ",".join(f"{t.dtype}:{TRTEXEC_FORMAT[t.format]}" for t in outputs)
    doc = {
        "artifact_version": 1,
        "loadable": loadable.name,
        "loadable_sha256": hashlib.sha256(blob).hexdigest(),
        "emulated": True,
        "source_model": source_model or {"path": "(DLA EMULATOR test artifact)", "sha256": None,
                                         "revision": None},
        "build": {"tool": "emulator/make_loadable.py (DLA EMULATOR)", "tensorrt_version": None,
                  "command": f"trtexec --onnx=model.onnx --useDLACore=0 --int8 --fp16 --buildDLAStandalone "
                             f"--inputIOFormats={iofmt_in} --outputIOFormats={iofmt_out} "
                             f"--saveEngine={loadable.name}"},
        "tensors": {"inputs": [facts(t) for t in inputs], "outputs": [facts(t) for t in outputs]},
        "model": model,
    }
    sidecar = d / f"{stem}.loadable.yaml"
    sidecar.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return EmulatedArtifact(loadable, sidecar, doc)


def _parse_tensor(spec: str, name: str) -> EmuTensor:
    """``dtype:format:NxCxHxW[:scale]``, e.g. ``int8:hwc4:1x3x64x64:0.0079``."""
    parts = spec.split(":")
    dims = [int(v) for v in parts[2].split("x")]
    scale = float(parts[3]) if len(parts) > 3 else None
    return EmuTensor(name, parts[1], parts[0], (dims[0], dims[1], dims[2], dims[3]), scale)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write an echo loadable for the DLA EMULATOR (test only).")
    ap.add_argument("--input", required=True, help="dtype:format:NxCxHxW[:scale]")
    ap.add_argument("--output", action="append", required=True, help="dtype:format:NxCxHxW[:scale]")
    ap.add_argument("-o", "--out", required=True, help="loadable file to write")
    a = ap.parse_args(argv)
    ins = [_parse_tensor(a.input, "input")]
    outs = [_parse_tensor(s, f"output{i}") for i, s in enumerate(a.output)]
    Path(a.out).write_bytes(build_loadable("echo", ins, outs))
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
