"""Width and height of a JPEG or PNG from its header, before anything is decoded.

``cv2.imdecode`` allocates the full image the header declares: a 249 kB PNG declaring 16000 x 16000 costs
1.6 GB and seconds. OpenCV has no header-only call that covers its formats, so the two formats the node
accepts on ``image/compressed`` (JPEG and PNG, what ``image_transport``'s compressed plugin produces) are
read here: PNG's IHDR chunk, JPEG's first SOFn segment. Anything else is refused as input.
"""

from __future__ import annotations

import numpy as np

from dla_infer_node.core.errors import InputError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# start-of-frame markers carry the size: SOF0-3, 5-7, 9-11, 13-15 (0xC4 DHT, 0xC8 JPG, 0xCC DAC are not)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# markers without a length field
_STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01, 0xD8}


def _bad(detail: str, buf: np.ndarray, stage: str) -> InputError:
    return InputError(f"cannot decode compressed image: {detail}", call="compressed_size",
                      params={"bytes": int(buf.size), "head": bytes(buf[:8]).hex()}, stage=stage)


def _jpeg_size(data: bytes, buf: np.ndarray, stage: str) -> tuple[int, int]:
    pos = 2
    n = len(data)
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            raise _bad(f"JPEG marker expected at byte {pos}", buf, stage)
        while pos < n and data[pos] == 0xFF:  # fill bytes before a marker
            pos += 1
        if pos >= n:
            break
        marker = data[pos]
        pos += 1
        if marker in _STANDALONE:
            continue
        if marker in (0xD9, 0xDA):  # end of image / start of scan before any frame header
            break
        if pos + 2 > n:
            break
        length = int.from_bytes(data[pos:pos + 2], "big")
        if marker in _SOF:
            if pos + 7 > n or length < 7:
                break
            height = int.from_bytes(data[pos + 3:pos + 5], "big")
            width = int.from_bytes(data[pos + 5:pos + 7], "big")
            return width, height
        if length < 2:
            raise _bad(f"JPEG segment length {length} at byte {pos}", buf, stage)
        pos += length
    raise _bad("JPEG without a frame header (SOFn) in its data", buf, stage)


def compressed_size(buf: np.ndarray, stage: str = "input") -> tuple[str, int, int]:
    """``(format, width, height)`` of JPEG/PNG bytes; :class:`InputError` for other formats, bad headers."""
    head = bytes(buf[:8])
    if head.startswith(b"\xff\xd8\xff"):
        # a JPEG header is usually within the first few kB (APPn/EXIF can be up to 64 kB per segment)
        return ("jpeg", *_jpeg_size(bytes(buf[:1 << 20]), buf, stage))
    if head == PNG_SIGNATURE:
        ihdr = bytes(buf[8:24])
        if len(ihdr) < 16 or ihdr[4:8] != b"IHDR":
            raise _bad("PNG without an IHDR chunk first", buf, stage)
        return "png", int.from_bytes(ihdr[8:12], "big"), int.from_bytes(ihdr[12:16], "big")
    raise _bad("not JPEG or PNG (the only compressed formats accepted)", buf, stage)


def check_compressed_size(buf: np.ndarray, max_pixels: int, stage: str = "input") -> tuple[int, int]:
    """The header's (width, height) if within ``max_pixels``; :class:`InputError` otherwise."""
    fmt, width, height = compressed_size(buf, stage)
    if width <= 0 or height <= 0:
        raise _bad(f"{fmt} header declares {width}x{height} pixels", buf, stage)
    if width * height > max_pixels:
        raise InputError(f"{fmt} image declares {width}x{height} = {width * height} pixels, above "
                         f"max_input_pixels {max_pixels}; refused before decoding",
                         call="compressed_size", params={"bytes": int(buf.size)}, stage=stage)
    return width, height
