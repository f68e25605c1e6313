"""Which TensorRT builds a DLA loadable, and how precision is chosen there: the support matrix as data.

A loadable is made by one TensorRT and must be compiled with the command of that TensorRT's line:

* ``10.x-flags`` (TensorRT 8.5 .. 10.7): precision by builder flags, ``trtexec --fp16`` or
  ``--int8 --calib=CACHE``.
* ``11.x-typed`` (TensorRT 11.4.1 and later, Jetson AGX Orin with JetPack >= 7.2.2): strongly typed; no
  precision flag exists, the ONNX's own tensor types (fp16 tensors, Q/DQ nodes for int8) decide.

Everything else builds no DLA loadable. Sources (NVIDIA TensorRT documentation, checked 2026-12):

* "Working with DLA", TensorRT 11.4.1:
  https://docs.nvidia.com/deeplearning/tensorrt/11.4.1/inference-library/work-with-dla.html
  (11.4.1: Orin with JetPack 7.2.2+ only; not Thor, not DriveOS, not JetPack 6.x; 10.7 was the last 10.x
  with DLA; none in 11.0 - 11.3; 11.4.0 only on Windows on ARM, beta)
* TensorRT 11.4.1 release notes:
  https://docs.nvidia.com/deeplearning/tensorrt/latest/getting-started/release-notes-11/11.4.1.html
* "Migrating trtexec Usage from TensorRT 10.x to 11.x" (precision flags and --calib removed):
  https://docs.nvidia.com/deeplearning/tensorrt/11.4.1/api/migration/tensorrt-10x-to-11x-trtexec.html
* "Migrating TensorRT from 10.x to 11.x on Jetson/JetPack":
  https://docs.nvidia.com/deeplearning/tensorrt/11.4.1/api/migration/tensorrt-10x-to-11x-jetson.html
The 8.5 lower bound is the oldest TensorRT this package's guide covers (JetPack 5.1); older releases
also had a DLA but are not tested against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dla_infer_node.core.errors import ModelError

LINE_FLAGS = "10.x-flags"
LINE_TYPED = "11.x-typed"

Version = tuple[int, int, int]


@dataclass(frozen=True)
class SupportRow:
    """TensorRT versions ``first``..``last`` (inclusive) and what they do for the DLA."""

    first: Version
    last: Version
    dla: bool
    line: str | None  # LINE_FLAGS / LINE_TYPED where dla is True
    where: str
    source: str  # which of the documents above says so


_END: Version = (999, 999, 999)

SUPPORT_MATRIX: tuple[SupportRow, ...] = (
    SupportRow((8, 5, 0), (10, 7, 999), True, LINE_FLAGS,
               "Jetson AGX Orin (JetPack 6.x ships 10.3), Xavier, DRIVE", "Working with DLA 11.4.1"),
    SupportRow((10, 8, 0), (10, 999, 999), False, None,
               "no DLA: 10.7 was the last 10.x release with DLA", "Working with DLA 11.4.1"),
    SupportRow((11, 0, 0), (11, 3, 999), False, None, "no DLA anywhere", "Working with DLA 11.4.1"),
    SupportRow((11, 4, 0), (11, 4, 0), False, None,
               "DLA only on Windows on ARM (beta), not on Jetson", "Working with DLA 11.4.1"),
    SupportRow((11, 4, 1), _END, True, LINE_TYPED,
               "Jetson AGX Orin with JetPack >= 7.2.2 (not Thor, not DriveOS, not JetPack 6.x)",
               "TensorRT 11.4.1 release notes"),
)

DLA_VERSIONS_TEXT = "TensorRT 8.5-10.7 (precision flags) and 11.4.1+ (strongly typed ONNX)"


def parse_version(text: str) -> Version:
    """``"10.3"``, ``"10.3.0.30"``, ``"11.4.1"`` -> (major, minor, patch); bad text is a ModelError."""
    m = re.fullmatch(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.\d+)*\s*", str(text))
    if not m:
        raise ModelError(f"not a TensorRT version: {text!r} (expected e.g. 10.3 or 11.4.1)",
                         call="parse_version", params={"text": text})
    return int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)


def format_version(v: Version) -> str:
    return f"{v[0]}.{v[1]}.{v[2]}"


def version_code(v: Version | str) -> int:
    """TensorRT's own integer for a version (``NV_TENSORRT_VERSION``), as its banner and calibration cache
    header print it: ``major*10000 + minor*100 + patch`` from TensorRT 10 on (10.3.0 -> 100300), and
    ``major*1000 + minor*100 + patch`` before (8.6.1 -> 8601)."""
    major, minor, patch = parse_version(v) if isinstance(v, str) else v
    return major * (10000 if major >= 10 else 1000) + minor * 100 + patch


def from_code(n: int) -> Version:
    """The inverse of :func:`version_code` (six digits: 10.x and later; four: 8.x/9.x)."""
    return (n // 10000, n // 100 % 100, n % 100) if n >= 100000 else (n // 1000, n // 100 % 10, n % 100)


# trtexec prints "&&&& RUNNING TensorRT.trtexec [TensorRT v100300] ..." and "[I] TensorRT version: 10.3.0"
_BANNER = re.compile(r"TensorRT[ .\w]*?\[?\s*v(\d{4,6})\]?")
_DOTTED = re.compile(r"TensorRT version:?\s*v?(\d+\.\d+(?:\.\d+)*)", re.IGNORECASE)


def parse_trtexec_version(output: str) -> Version | None:
    """The TensorRT version in ``trtexec --version`` output (or any log with its banner), else None.

    The banner carries :func:`version_code`: ``v100300`` is 10.3.0, ``v110401`` 11.4.1, ``v8601`` 8.6.1.
    """
    m = _DOTTED.search(output)
    if m:
        return parse_version(m.group(1))
    m = _BANNER.search(output)
    if m:
        return from_code(int(m.group(1)))
    return None


def lookup(version: Version | str) -> SupportRow | None:
    v = parse_version(version) if isinstance(version, str) else version
    return next((r for r in SUPPORT_MATRIX if r.first <= v <= r.last), None)


def line_for(version: Version | str) -> str:
    """The build line of a TensorRT that makes DLA loadables; a ModelError naming the ones that do else."""
    v = parse_version(version) if isinstance(version, str) else version
    row = lookup(v)
    if row is None or not row.dla or row.line is None:
        why = row.where if row is not None else "older than any TensorRT this package supports"
        raise ModelError(f"TensorRT {format_version(v)} builds no DLA loadable ({why}); "
                         f"DLA loadables are built by {DLA_VERSIONS_TEXT}",
                         call="trt_support.line_for", params={"tensorrt": format_version(v)})
    return row.line


def describe(version: Version | str | None) -> dict[str, object]:
    """Plain data for records: version, DLA yes/no, line, where (``None`` -> unknown)."""
    if version is None:
        return {"version": None, "dla": None, "line": None, "where": "TensorRT not found"}
    v = parse_version(version) if isinstance(version, str) else version
    row = lookup(v)
    return {"version": format_version(v), "dla": bool(row and row.dla),
            "line": row.line if row else None,
            "where": row.where if row else "older than any TensorRT this package supports"}


def same_dla_software(a: Version | str, b: Version | str) -> bool:
    """Whether two TensorRT versions ship the same DLA compiler: major.minor.patch must match.

    A loadable built by one DLA software version and loaded under another fails with
    cudlaErrorIncompatibleDlaSWVersion; the patch level is compared too because the DLA compiler is
    versioned with the JetPack release, not with TensorRT's API.
    """
    va = parse_version(a) if isinstance(a, str) else a
    vb = parse_version(b) if isinstance(b, str) else b
    return va == vb
