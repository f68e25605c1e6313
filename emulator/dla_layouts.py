"""DLA EMULATOR (test infrastructure): read an emulated loadable back and move tensors in and out of
their DLA layouts with numpy -- the host side of the ``network`` program (emulator/network_host.py).

This is a SECOND, independent reading of the layouts: it takes the strides from the loadable's records
(what the emulated "compiler" declared) and the element placement rules of the formats, and shares no
code with ``dla_infer_node.core.tensor_format`` (the package's layout code under test) nor with the C
reader in emu_format.c. Placement, per format (byte offsets; e = element size; s = record strides):

* linear: n*s[3] + c*s[2] + h*s[1] + w*s[0]
* hwc4:   n*s[3] + h*s[1] + w*s[0] + c*e
* chw16 / chw32: n*s[3] + (c // V)*s[2] + h*s[1] + w*s[0] + (c % V)*e, V = 16 / 32
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from emulator.make_loadable import EMU_DTYPE, EMU_FORMAT, MAGIC, PROGRAMS

_FORMAT_NAME = {v: k for k, v in EMU_FORMAT.items()}
_DTYPE_NAME = {v: k for k, v in EMU_DTYPE.items()}
_RECORD = 192


@dataclass(frozen=True)
class Record:
    """One tensor record as the loadable declares it."""

    name: str
    size: int
    shape: tuple[int, int, int, int]  # n, c, h, w (c as declared; may include padding channels)
    format: str
    dtype: str
    strides: tuple[int, int, int, int]
    scale: float


@dataclass(frozen=True)
class Loadable:
    program: str
    inputs: tuple[Record, ...]
    outputs: tuple[Record, ...]
    params: bytes


def parse(blob: bytes) -> Loadable:
    """Read header, records and params; raises ValueError on anything malformed."""
    if blob[:8] != MAGIC:
        raise ValueError("not an emulated loadable (magic)")
    _version, program, n_in, n_out, params_size, _ = struct.unpack_from("<6I", blob, 8)
    records = []
    for i in range(n_in + n_out):
        r = blob[32 + i * _RECORD: 32 + (i + 1) * _RECORD]
        name = r[:96].split(b"\0", 1)[0].decode()
        size, n, c, h, w = struct.unpack_from("<5Q", r, 96)
        strides = struct.unpack_from("<4I", r, 144)
        (scale,) = struct.unpack_from("<f", r, 176)
        records.append(Record(name, size, (n, c, h, w), _FORMAT_NAME[r[141]], _DTYPE_NAME[r[142]],
                              (strides[0], strides[1], strides[2], strides[3]), scale))
    start = 32 + (n_in + n_out) * _RECORD
    if len(blob) != start + params_size:
        raise ValueError(f"loadable size {len(blob)} != {start + params_size}")
    prog = {v: k for k, v in PROGRAMS.items()}[program]
    return Loadable(prog, tuple(records[:n_in]), tuple(records[n_in:]), blob[start:])


def _strided(rec: Record, buf: np.ndarray) -> np.ndarray:
    """A (n, c_declared, h, w) strided view of ``buf`` (uint8, rec.size bytes) in the record's dtype."""
    n, c, h, w = rec.shape
    s0, s1, s2, s3 = rec.strides
    e = 2 if rec.dtype == "fp16" else 1
    typed = buf.view(np.float16 if e == 2 else np.int8)
    as_strided = np.lib.stride_tricks.as_strided
    if rec.format == "linear":
        return as_strided(typed, (n, c, h, w), (s3, s2, s1, s0))
    if rec.format == "hwc4":
        return as_strided(typed, (n, c, h, w), (s3, e, s1, s0))
    v = 16 if rec.format == "chw16" else 32
    blocks = as_strided(typed, (n, -(-c // v), v, h, w), (s3, s2, e, s1, s0))
    return blocks.reshape(n, -1, h, w)[:, :c]  # reshape copies; fine for reading


def read(rec: Record, buf: np.ndarray) -> np.ndarray:
    """The tensor as float32 (n, c_declared, h, w): fp16 widened, int8 dequantised with the record's scale."""
    if rec.format in ("chw16", "chw32"):
        vals = _strided(rec, buf).astype(np.float32)
    else:
        vals = np.array(_strided(rec, buf), dtype=np.float32)
    return vals * np.float32(rec.scale) if rec.dtype == "int8" else vals


def encode(rec: Record, values: np.ndarray) -> np.ndarray:
    """float values -> the record's element type (fp16 round-to-nearest; int8 clamp(round(x / scale)))."""
    if rec.dtype == "fp16":
        return values.astype(np.float16)
    return np.clip(np.rint(values / np.float32(rec.scale)), -128, 127).astype(np.int8)


def write(rec: Record, buf: np.ndarray, values: np.ndarray) -> None:
    """Zero ``buf`` (padding channels and row pads stay 0), then place ``values`` (n, c_logical, h, w)."""
    buf[:] = 0
    n, c, h, w = values.shape
    if c > rec.shape[1] or (n, h, w) != (rec.shape[0], rec.shape[2], rec.shape[3]):
        raise ValueError(f"{rec.name}: values {values.shape} do not fit the record {rec.shape}")
    q = encode(rec, values)
    if rec.format in ("linear", "hwc4"):
        _strided(rec, buf)[:, :c] = q
        return
    v = 16 if rec.format == "chw16" else 32
    s0, s1, s2, s3 = rec.strides
    e = 2 if rec.dtype == "fp16" else 1
    blocks = np.lib.stride_tricks.as_strided(buf.view(np.float16 if e == 2 else np.int8),
                                             (n, -(-rec.shape[1] // v), v, h, w), (s3, s2, e, s1, s0))
    padded = np.zeros((n, blocks.shape[1] * v, h, w), q.dtype)
    padded[:, :c] = q
    blocks[...] = padded.reshape(n, -1, v, h, w)
