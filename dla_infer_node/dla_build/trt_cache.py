"""The TensorRT calibration cache (the 10.x line's ``trtexec --calib``) as trtexec reads it.

The file is a header line ``TRT-<version code>-<calibrator>`` then ``tensor: <8 hex digits>`` per tensor,
the hex being the big-endian float32 bits of the tensor's symmetric int8 scale. trtexec's ``--calib``
calibrator is an entropy calibrator 2 (``IInt8EntropyCalibrator2``). TensorRT uses a cache only when its
header names that calibrator and the running TensorRT's own version code (10.3.0 -> ``100300``); on a
mismatch it logs "Calibration table does not match calibrator algorithm type" and calibrates again, which
in trtexec means without real data, and the build fails or gets random scales. So the header we write
names ``EntropyCalibration2`` and the exact target TensorRT, whatever method computed the scales (minmax,
entropy or percentile on our side): the header tells TensorRT which calibrator reads the table, not how
the numbers were found, and TensorRT takes the scales as they are.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

from dla_infer_node.artifact import trt_support
from dla_infer_node.core.errors import ModelError

CALIBRATOR = "EntropyCalibration2"  # trtexec's --calib calibrator (IInt8EntropyCalibrator2)


def header_for(version: str | trt_support.Version) -> str:
    """``TRT-100300-EntropyCalibration2`` for TensorRT 10.3.0: the only header its trtexec accepts."""
    return f"TRT-{trt_support.version_code(version)}-{CALIBRATOR}"


def write_cache(path: Path, scales: Mapping[str, float], version: str | trt_support.Version) -> Path:
    lines = [header_for(version)] + [f"{name}: {struct.pack('>f', s).hex()}" for name, s in scales.items()]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


def read_cache(path: str | Path) -> tuple[str, dict[str, float]]:
    """(header, {tensor: scale}); one-line ModelError when the file is missing or not a cache."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read calibration cache: {exc}", call="read_cache",
                         params={"path": str(p)}) from exc
    if not lines or not lines[0].startswith("TRT-"):
        raise ModelError("not a TensorRT calibration cache (first line should start with 'TRT-')",
                         call="read_cache", params={"path": str(p)})
    out: dict[str, float] = {}
    for line in lines[1:]:
        name, sep, hexbits = line.rpartition(":")
        if not sep:
            continue
        try:
            out[name.strip()] = struct.unpack(">f", bytes.fromhex(hexbits.strip()))[0]
        except ValueError as exc:
            raise ModelError(f"bad cache line {line!r}", call="read_cache", params={"path": str(p)}) from exc
    return lines[0].strip(), out


def cache_for(cache: Path, version: str, retagged: Path) -> tuple[Path, str | None]:
    """The cache to hand the trtexec of ``version``: ``cache`` itself when its header is already that
    TensorRT's, else ``retagged`` written with the right header and the same scales. Returns the path and,
    when it rewrote, a note saying why."""
    header, scales = read_cache(cache)
    want = header_for(version)
    if header == want:
        return cache, None
    if not scales:
        raise ModelError("calibration cache holds no tensor scales", call="cache_for",
                         params={"cache": str(cache)})
    retagged.parent.mkdir(parents=True, exist_ok=True)
    write_cache(retagged, scales, version)
    return retagged, (f"calibration cache {cache} has the header {header}; TensorRT "
                      f"{trt_support.format_version(trt_support.parse_version(version))}'s trtexec uses a "
                      f"cache only under {want} (else it recalibrates without data): wrote {retagged} with "
                      f"that header and the same {len(scales)} scales")
