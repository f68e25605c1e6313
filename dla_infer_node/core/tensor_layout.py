"""DLA tensor layouts: the byte layout of one loadable tensor, built dense or read from a descriptor.

Layouts (TensorRT's definitions: "Working with DLA" / "DLA Supported Layers and Restrictions", I/O formats):

- ``linear`` (kDLA_LINEAR): ``[N][C][H][roundUp(W, 64/elem)]`` - every row padded to 64 bytes.
- ``hwc4`` (kDLA_HWC4): C in {1, 3, 4} stored as C' = 1, 4, 4; ``[N][H][roundUp(W, 64/C'/elem)][C']`` (Orin).
- ``chw16`` (fp16) / ``chw32`` (int8): ``[N][ceil(C/V)][H][W][V]`` with V = 16 / 32.

``strides`` are in BYTES: ``[0]`` pixel atom, ``[1]`` line (row), ``[2]`` surface (one plane or one channel
group), ``[3]`` batch. A descriptor from a loadable may use strides larger than the dense ones, so no
offset is ever derived from ``n*c*h*w``: :meth:`TensorLayout.element_view` addresses every element
through the strides. Packing and unpacking live in :mod:`dla_infer_node.core.tensor_format`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dla_infer_node.core.errors import ModelError

FORMATS = ("linear", "hwc4", "chw16", "chw32")
DTYPES = ("fp16", "int8")
ELEM_SIZE = {"fp16": 2, "int8": 1}
NP_DTYPE: dict[str, np.dtype] = {"fp16": np.dtype("<f2"), "int8": np.dtype("i1")}
VECTOR = {"chw16": 16, "chw32": 32}
# The DLA on Orin wants 64-byte aligned rows for linear and hwc4 tensors (32 on Xavier).
ROW_ALIGN_BYTES = 64


class LayoutError(ModelError):
    """A tensor layout/descriptor is invalid or a tensor does not fit the layout."""

    stage = "tensor_layout"


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def stored_channels(fmt: str, c: int) -> int:
    """Channels per pixel atom as stored: C' for hwc4, V for chw16/chw32, 1 for linear."""
    if fmt == "hwc4":
        return 1 if c == 1 else 4
    return VECTOR.get(fmt, 1)


@dataclass(frozen=True)
class TensorLayout:
    """One tensor's byte layout. Build with :meth:`dense` or :meth:`from_descriptor`."""

    format: str
    dtype: str
    n: int
    c: int
    h: int
    w: int
    strides: tuple[int, int, int, int]
    size: int

    # -- construction ---------------------------------------------------------------------------------
    @staticmethod
    def _check_basic(fmt: str, dtype: str, n: int, c: int, h: int, w: int) -> None:
        params = {"format": fmt, "dtype": dtype, "n": n, "c": c, "h": h, "w": w}
        if fmt not in FORMATS:
            raise LayoutError(f"format must be one of {FORMATS}", call="TensorLayout", params=params)
        if dtype not in DTYPES:
            raise LayoutError(f"dtype must be one of {DTYPES}", call="TensorLayout", params=params)
        if min(n, c, h, w) < 1:
            raise LayoutError("n, c, h, w must all be >= 1", call="TensorLayout", params=params)
        if fmt == "hwc4" and c not in (1, 3, 4):
            raise LayoutError("hwc4 needs C in (1, 3, 4)", call="TensorLayout", params=params)
        if fmt == "chw16" and dtype != "fp16":
            raise LayoutError("chw16 is fp16 only", call="TensorLayout", params=params)
        if fmt == "chw32" and dtype != "int8":
            raise LayoutError("chw32 is int8 only", call="TensorLayout", params=params)

    @classmethod
    def dense(cls, format: str, dtype: str, n: int, c: int, h: int, w: int) -> TensorLayout:
        """The minimal layout TensorRT's rules give (64-byte rows for linear/hwc4)."""
        n, c, h, w = int(n), int(c), int(h), int(w)
        cls._check_basic(format, dtype, n, c, h, w)
        elem = ELEM_SIZE[dtype]
        cp = stored_channels(format, c)
        atom = elem * cp
        if format == "linear":
            line = _round_up(w, ROW_ALIGN_BYTES // elem) * elem
            surface = line * h
            batch = surface * c
        elif format == "hwc4":
            line = _round_up(w, ROW_ALIGN_BYTES // cp // elem) * atom
            surface = line * h
            batch = surface
        else:
            line = w * atom
            surface = line * h
            batch = surface * (-(-c // cp))
        return cls(format, dtype, n, c, h, w, (atom, line, surface, batch), batch * n)

    @classmethod
    def from_descriptor(
        cls,
        format: str,
        dtype: str,
        n: int,
        c: int,
        h: int,
        w: int,
        strides: tuple[int, ...] | list[int],
        size: int,
    ) -> TensorLayout:
        """A layout from a loadable's tensor descriptor, validated against the format's rules.

        Strides may exceed the dense ones (extra padding) but must be consistent: the pixel atom is exactly
        ``elem*C'`` (``elem`` for linear), rows hold W atoms, surfaces hold H rows, a batch holds all
        planes/groups, and ``size`` covers the last element.
        """
        n, c, h, w, size = int(n), int(c), int(h), int(w), int(size)
        cls._check_basic(format, dtype, n, c, h, w)
        params = {"format": format, "dtype": dtype, "n": n, "c": c, "h": h, "w": w,
                  "strides": tuple(strides), "size": size}
        if len(strides) < 4:
            raise LayoutError("need 4 byte strides (atom, line, surface, batch)",
                              call="TensorLayout.from_descriptor", params=params)
        atom, line, surface, batch = (int(s) for s in strides[:4])
        elem = ELEM_SIZE[dtype]
        cp = stored_channels(format, c)
        planes = c if format == "linear" else (1 if format == "hwc4" else -(-c // cp))
        problems = []
        if atom != elem * cp:
            problems.append(f"pixel atom stride {atom} != {elem * cp} (elem {elem} x {cp} channels)")
        if line < w * atom:
            problems.append(f"line stride {line} < width {w} x atom {atom}")
        if line % elem:
            problems.append(f"line stride {line} not a multiple of the element size {elem}")
        if surface < line * h:
            problems.append(f"surface stride {surface} < {h} lines x {line}")
        if batch < surface * planes:
            problems.append(f"batch stride {batch} < {planes} surfaces x {surface}")
        needed = (n - 1) * batch + (planes - 1) * surface + (h - 1) * line + w * atom
        if size < needed:
            problems.append(f"size {size} < {needed} bytes the strides need")
        if problems:
            raise LayoutError("; ".join(problems), call="TensorLayout.from_descriptor", params=params)
        return cls(format, dtype, n, c, h, w, (atom, line, surface, batch), size)

    # -- derived facts --------------------------------------------------------------------------------
    @property
    def elem_size(self) -> int:
        return ELEM_SIZE[self.dtype]

    @property
    def np_dtype(self) -> np.dtype:
        return NP_DTYPE[self.dtype]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    @property
    def vector(self) -> int:
        """Channels per stored atom (C' for hwc4, V for chw16/32, 1 for linear)."""
        return stored_channels(self.format, self.c)

    def element_view(self, buf: np.ndarray) -> np.ndarray:
        """A typed, strided view of ``buf`` addressing the real elements only.

        ``(N, C, H, W)`` for linear/hwc4; ``(N, G, V, H, W)`` for chw16/chw32 (G channel groups, the last
        one possibly holding pad channels beyond C).
        """
        a, line, surface, batch = self.strides
        e = self.elem_size
        if self.format == "linear":
            shape: tuple[int, ...] = (self.n, self.c, self.h, self.w)
            strides: tuple[int, ...] = (batch, surface, line, a)
        elif self.format == "hwc4":
            shape, strides = (self.n, self.c, self.h, self.w), (batch, e, line, a)
        else:
            v = self.vector
            shape = (self.n, -(-self.c // v), v, self.h, self.w)
            strides = (batch, surface, e, line, a)
        return np.ndarray(shape, dtype=self.np_dtype, buffer=buf, offset=0, strides=strides)
