"""Convert only the pixels the letterbox keeps: the CPU preprocess of YUV, NV12/NV21, Bayer, 16-bit frames.

When a frame is an odd whole multiple k of its resized size on both axes (1920x1080 -> 640x360 is 3x),
the resize is a pure gather: network pixel ``(x, y)`` is source pixel ``(k*x + (k-1)/2, k*y + (k-1)/2)``
(see :mod:`dla_infer_node.core.preprocess`). These conversions are per pixel -- a YUV 4:2:2 pixel's RGB
depends on its own Y and its pair's U and V, an NV12 pixel's on its Y and its 2x2 block's U and V, a
16-bit value's 8-bit one on itself -- so gathering first and converting the gathered pixels gives exactly
the bytes of converting the whole frame and then resizing it, at 1/k^2 of the conversion work.

YUYV/UYVY: a row read as pairs of pixels (4 bytes, one chroma) is a 4-channel image, and the pair holding
pixel ``k*x + (k-1)/2`` is pair ``floor((x + 0.5) * k / 2)`` (``2kx + k`` is odd, so no rounding differs):
exactly the one ``INTER_NEAREST_EXACT`` picks when that image is resized to the network width. The kept
pairs are converted by the frame's own code, and of each pair's two pixels the kept one is taken.
NV12/NV21: ``INTER_NEAREST_EXACT`` gathers the kept luma from the Y plane, and from the half-size chroma
plane the kept pixel's chroma (source index ``floor((x + 0.5) * k / 2)`` is ``floor((k*x + (k-1)/2) / 2)``
for odd k). Each network pixel then becomes its own 4:2:2 pair ``[Y, U, Y, V]`` (its luma doubled by a
nearest resize, merged with the chroma row), OpenCV's YUYV (NV21: YVYU) conversion of that double-width
image gives every network pixel twice, and a nearest resize keeps one of each pair. OpenCV's 4:2:0 and 4:2:2
conversions share their coefficients and rounding; tests check every encoding byte for byte against
``cvtColor`` of the whole frame. Each NV step is one vectorised OpenCV call: mixChannels, which gathered
NV and Bayer frames before, has no fast path for such channel patterns and cost 2-3x more on 2 cores.
16-bit frames are gathered by ``INTER_NEAREST_EXACT`` on their 16-bit values and then scaled.

Bayer frames cannot be gathered first: a demosaiced pixel depends on its neighbours. They are demosaiced
whole (16-bit ones after scaling to 8 bits, see :meth:`GatherConvert.planes`), then gathered the same way.
"""

from __future__ import annotations

import cv2
import numpy as np
from numpy.lib.stride_tricks import as_strided

from dla_infer_node.core import encodings
from dla_infer_node.core.color_convert import scale_to_8bit, to_rgb_same_depth
from dla_infer_node.core.encodings import BAYER, PACKED, YUV420SP, YUV422, Encoding


class GatherConvert:
    """Frame (one encoding, one size) -> the uint8 packed frame at the resized size, exactly as
    converting the whole frame and resizing it would give (module doc). Holds its output buffers."""

    def __init__(self, enc: Encoding, src_w: int, src_h: int, new_w: int, new_h: int) -> None:
        self.enc = enc
        self._size = (new_w, new_h)
        self._kx, self._ky = src_w // new_w, src_h // new_h
        self._src_h = src_h
        self._planes = [np.empty((new_h, new_w), np.uint8) for _ in range(3)]
        if enc.family == BAYER:
            self._bayer8 = encodings.lookup(enc.name.replace("16", "8"))
            self._full = np.empty((src_h, src_w, 3), np.uint8)
        if enc.family in (BAYER, YUV420SP):
            self._small = np.empty((new_h, new_w, 3), np.uint8)  # the kept pixels, RGB
        if enc.family in (YUV422, YUV420SP):
            self._pairs = np.empty((new_h, new_w, 4), np.uint8)  # a 4:2:2 pair per network pixel
            self._rgb2 = np.empty((new_h, 2 * new_w, 3), np.uint8)  # ... converted: two pixels each
        if enc.family == YUV420SP:
            self._luma = np.empty((new_h, new_w), np.uint8)
            self._luma2 = np.empty((new_h, 2 * new_w), np.uint8)  # each kept luma twice
            self._chroma = np.empty((new_h, new_w, 2), np.uint8)  # its chroma pair (UV, NV21: VU)
        if enc.family == YUV422:
            # which converted pixel of each pair is the network pixel's: for network pixels 2m and 2m+1,
            # pixel (0 or 1) of pair 2m and of pair 2m+1 (the kept sample's own parity)
            h = (self._kx - 1) // 2
            first, second = h % 2, 2 + (h + 1) % 2
            self._pick = [i for c in range(3) for i in (3 * first + c, 2 * c, 3 * second + c, 2 * c + 1)]

    @property
    def way(self) -> str:
        """How this frame size is converted, in words (benchmarks, diagnostics)."""
        if self.enc.family != BAYER:
            return "gathered, then converted at the network size (exact)"
        if self.enc.bits == 8:
            return "demosaiced whole, then gathered (exact)"
        return "scaled to 8 bits, demosaiced whole, then gathered (within one 8-bit level)"

    @staticmethod
    def applies(enc: Encoding, src_w: int, src_h: int, new_w: int, new_h: int) -> bool:
        """Whether this frame size has the exact gather (odd whole factors; pairs of network pixels)."""
        if enc.family == PACKED and enc.bits == 8:
            return False
        odd = all(s % n == 0 and (s // n) % 2 == 1 and s != n for s, n in ((src_w, new_w), (src_h, new_h)))
        return odd and (enc.family != YUV422 or new_w % 2 == 0)  # 4:2:2: pairs of network pixels

    @property
    def gives_planes(self) -> bool:
        """YUV and Bayer come out as R, G, B planes (:meth:`planes`), 16-bit packed ones as a frame
        (:meth:`packed`)."""
        return self.enc.family != PACKED

    def packed(self, frame: np.ndarray) -> tuple[np.ndarray, str]:
        """A validated 16-bit packed view -> ``(new_h, new_w, C)`` uint8 and its 8-bit encoding."""
        # NEAREST copies whole 16-bit values: read them as native, swap the few kept ones after
        values = frame.view(np.uint16) if not frame.dtype.isnative else frame
        small = cv2.resize(values, self._size, interpolation=cv2.INTER_NEAREST_EXACT)
        if not frame.dtype.isnative:
            small = small.byteswap()
        return scale_to_8bit(small.reshape(*small.shape[:2], -1)), self.enc.eight_bit

    def planes(self, frame: np.ndarray) -> list[np.ndarray]:
        """A validated YUV or Bayer view -> its R, G, B uint8 planes at the resized size (reused buffers)."""
        if self.enc.family == BAYER:
            # 16-bit: scaled before demosaicing, not after as cv_bridge does (OpenCV's 16-bit demosaic
            # is ~3x its 8-bit one); the two orders differ by at most 1 in the 8-bit result
            mosaic = frame if self.enc.bits == 8 else scale_to_8bit(frame)
            rgb = to_rgb_same_depth(mosaic, self._bayer8, dst=self._full)
            return self._split(cv2.resize(rgb, self._size, dst=self._small,
                                          interpolation=cv2.INTER_NEAREST_EXACT))
        w, h = self._size
        if self.enc.family == YUV422:
            pairs = as_strided(frame, (frame.shape[0], frame.shape[1] // 2, 4), (frame.strides[0], 4, 1),
                               writeable=False)
            cv2.resize(pairs, self._size, dst=self._pairs, interpolation=cv2.INTER_NEAREST_EXACT)
            code = self.enc.to_rgb_code or cv2.COLOR_YUV2RGB_YUY2  # every YUV entry has its code
            cv2.cvtColor(self._pairs.reshape(h, 2 * w, 2), code, dst=self._rgb2)
            # the kept pixel of each pair, straight into the three planes (two network pixels at a time)
            cv2.mixChannels([self._rgb2.reshape(h, w // 2, 12)],
                            [p.reshape(h, w // 2, 2) for p in self._planes], self._pick)
            return self._planes
        self._pairs_nv(frame)
        code = cv2.COLOR_YUV2RGB_YVYU if self.enc.name == "nv21" else cv2.COLOR_YUV2RGB_YUY2
        cv2.cvtColor(self._pairs.reshape(h, 2 * w, 2), code, dst=self._rgb2)
        # both pixels of a pair are the network pixel: keep one
        small = cv2.resize(self._rgb2, self._size, dst=self._small, interpolation=cv2.INTER_NEAREST)
        return self._split(small)

    def _pairs_nv(self, frame: np.ndarray) -> None:
        """Each network pixel of an NV12/NV21 frame as its own pair ``[Y, C1, Y, C2]`` in ``_pairs``."""
        w, h = self._size
        plane = frame if frame.ndim == 2 else frame[:, :, 0]
        luma, chroma = plane[:self._src_h], plane[self._src_h:]
        cv2.resize(luma, self._size, dst=self._luma, interpolation=cv2.INTER_NEAREST_EXACT)
        cv2.resize(self._luma, (2 * w, h), dst=self._luma2, interpolation=cv2.INTER_NEAREST)
        chroma2 = as_strided(chroma, (chroma.shape[0], chroma.shape[1] // 2, 2), (chroma.strides[0], 2, 1),
                             writeable=False)  # the chroma plane as a half-width 2-channel image
        cv2.resize(chroma2, self._size, dst=self._chroma, interpolation=cv2.INTER_NEAREST_EXACT)
        cv2.merge([self._luma2, self._chroma.reshape(h, 2 * w)], self._pairs.reshape(h, 2 * w, 2))

    def _split(self, small: np.ndarray) -> list[np.ndarray]:
        cv2.split(small, self._planes)
        return self._planes
