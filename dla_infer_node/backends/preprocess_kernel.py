"""The fused preprocessing kernel: CUDA C source, its parameter block, and the host-side tap tables.

Kept free of CUDA imports so that CI (no GPU) can test the arithmetic and compile the source with nvcc.

Why the resize looks like this: the CPU path resizes uint8 frames with ``cv2.resize(INTER_LINEAR)``, which
for 8-bit images runs in fixed point and rounds to uint8 *before* normalisation; a float bilinear kernel
differs from it by one uint8 level on many pixels (0.0039 after /255, more than the 1e-3 budget). So the
kernel reproduces OpenCV's 8-bit arithmetic exactly (checked against OpenCV 5.1 in
``test/backends/test_gpu_preprocess_cpu.py`` over hundreds of random sizes, and on the GPU against ``cv2``
itself):

- per destination column/row, ``f = float((d + 0.5) * (1 / (dst/src)) - 0.5)`` (double, then float),
  ``s = floor(f)``, ``f -= s``; weights ``rint((1-f)*2048)`` and ``rint(f*2048)`` (11 fraction bits);
- columns clamp the tap (``s < 0`` -> 0, ``s >= src-1`` -> last column, weight 0 on the second tap);
  rows keep the unclamped weights and only clip the row index (that is what OpenCV does);
- horizontal pass in int: ``h = S[s0]*a0 + S[s1]*a1``; vertical pass as OpenCV's SIMD code does it:
  ``((h0 >> 4) * b0 >> 16) + ((h1 >> 4) * b1 >> 16)``, then ``(v + 2) >> 2`` saturated to uint8.

Normalisation is ``fma(pixel, 1/std, -mean/std)`` in float32, which is what ``cv2.addWeighted`` computes on
an FMA machine (the CPU path's conversion), and the pad value is normalised on the host exactly as the
CPU path fills its padding. fp16 is round-to-nearest-even; int8 is ``clamp(rint(x / scale))``, the
division in float32, as ``tensor_format.pack`` does. The tables are computed here, on the host, once per
frame geometry, so the kernel does no floating-point index arithmetic at all.
"""

from __future__ import annotations

import ctypes
import hashlib

import numpy as np

COEF_BITS = 11  # OpenCV's INTER_RESIZE_COEF_BITS
COEF_ONE = 1 << COEF_BITS
STRIDE_ALIGN = 16  # line/surface/batch strides must be multiples of this (every chunk size divides it)
BLOCK_THREADS = 256
MAX_CHANNELS = 4

KERNEL_NAME = "dla_pack"
# (element bytes, channels per pixel atom) -> bytes each thread writes. Instantiated for linear (1),
# hwc4 (C' = 1 is addressed like a one-plane linear tensor, C' = 4), chw16 (fp16), chw32 (int8).
# Chunks hold about 4 real elements: with 16-byte chunks everywhere the linear and hwc4 kernels had too
# few threads to hide latency on an H200 (linear int8 reached 22 % of copy bandwidth); chw chunks are
# mostly pad channels, so they stay 16 bytes wide.
CHUNK_BYTES: dict[tuple[int, int], int] = {
    (2, 1): 8, (1, 1): 4, (2, 4): 8, (1, 4): 8, (2, 16): 16, (1, 32): 16,
}
VARIANTS = tuple(CHUNK_BYTES)

KERNEL_SOURCE = r"""
// Fused letterbox + bilinear resize + channel order + normalisation + fp16/int8 + DLA layout.
// Each thread writes one aligned 16-byte chunk of the destination; chunks that fall on row pads, pad
// channels, surface/batch slack or the tail are written as zeros, so no byte of the buffer is left stale.
// Written for NVRTC: no headers.

struct PackParams {
    const unsigned char* src;   // frame in device staging, rows of src_step bytes
    const int4* xtab;           // new_w entries: (tap0 byte offset, tap1 byte offset, a0, a1)
    const int4* ytab;           // new_h entries: (row0 byte offset, row1 byte offset, b0, b1)
    unsigned char* dst;         // DLA input buffer
    unsigned int size;          // bytes of dst to write
    unsigned int line;          // byte strides: line, surface, batch (multiples of 16)
    unsigned int surface;
    unsigned int batch;
    unsigned int line_m, line_s;        // n / d == umulhi(n, m) >> s for n < 2^31 (host-computed)
    unsigned int surface_m, surface_s;
    unsigned int batch_m, batch_s;
    int n, groups, h, w, c;     // groups: planes (linear), 1 (hwc4), ceil(C/V) (chw16/chw32)
    int pad_x, pad_y, new_w, new_h;
    int fused;                  // 1: fma like the CPU path's SIMD loop, 0: its scalar loop (mul, add)
    int src_off[4];             // byte offset within a source pixel of each model channel
    float alpha[4];             // x = fma(pixel, alpha, gamma)
    float gamma[4];
    float pad[4];               // normalised pad value
    float scale;                // int8 calibration scale
};

__device__ __forceinline__ int pick_i(const int* a, unsigned int k) {
    // constant indices only: a run-time index into kernel parameters would spill to local memory
    return k == 0 ? a[0] : (k == 1 ? a[1] : (k == 2 ? a[2] : a[3]));
}
__device__ __forceinline__ float pick_f(const float* a, unsigned int k) {
    return k == 0 ? a[0] : (k == 1 ? a[1] : (k == 2 ? a[2] : a[3]));
}

__device__ __forceinline__ unsigned short f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ unsigned int fast_div(unsigned int n, unsigned int m, unsigned int s) {
    return __umulhi(n, m) >> s;  // exact for n < 2^31 with the host's (m, s); see divisor_magic()
}

// The output bytes live in registers; element i is inserted with compile-time shifts (a union indexed
// at run time would go to local memory).
template <int CB>
struct Chunk {
    unsigned int w[CB / 4];
};

template <int ES, int CB>
__device__ __forceinline__ void put(Chunk<CB>& out, int i, float f, float scale) {
    unsigned int bits;
    if (ES == 2) {
        bits = f32_to_f16(f);
    } else {
        float q = rintf(__fdiv_rn(f, scale));
        q = fminf(fmaxf(q, -128.0f), 127.0f);
        bits = (unsigned int)(unsigned char)(signed char)(int)q;
    }
    const int per_word = 4 / ES;
    out.w[i / per_word] |= bits << (8 * ES * (i % per_word));
}

// OpenCV's 8-bit INTER_LINEAR for one output sample (see the Python module docstring).
__device__ __forceinline__ int resample(const unsigned char* __restrict__ r0,
                                        const unsigned char* __restrict__ r1, int4 xt, int4 yt) {
    const int h0 = (int)__ldg(r0 + xt.x) * xt.z + (int)__ldg(r0 + xt.y) * xt.w;
    const int h1 = (int)__ldg(r1 + xt.x) * xt.z + (int)__ldg(r1 + xt.y) * xt.w;
    const int v = (((h0 >> 4) * yt.z) >> 16) + (((h1 >> 4) * yt.w) >> 16);
    return min(max((v + 2) >> 2, 0), 255);
}

template <int ES, int CPG, int CB>
__device__ __forceinline__ void pack_chunk(const PackParams& p) {
    constexpr int EPC = CB / ES;                      // elements per chunk
    constexpr int PIX = EPC >= CPG ? EPC / CPG : 1;   // pixels per chunk
    constexpr int CH = EPC >= CPG ? CPG : EPC;        // channel slots per pixel in one chunk
    const unsigned int off = (blockIdx.x * blockDim.x + threadIdx.x) * (unsigned int)CB;
    if (off >= p.size) return;
    Chunk<CB> out;
#pragma unroll
    for (int k = 0; k < CB / 4; ++k) out.w[k] = 0u;
    const unsigned int n = fast_div(off, p.batch_m, p.batch_s);
    unsigned int r = off - n * p.batch;
    const unsigned int g = fast_div(r, p.surface_m, p.surface_s);
    r -= g * p.surface;
    const unsigned int y = fast_div(r, p.line_m, p.line_s);
    const unsigned int e0 = (r - y * p.line) / ES;    // first element of the chunk within its line
    const unsigned int x0 = e0 / CPG;
    const unsigned int k0 = e0 % CPG;
    // rows past H, planes past G, batch slack, and chunks holding only pad channels stay zero
    if (n < (unsigned int)p.n && g < (unsigned int)p.groups && y < (unsigned int)p.h &&
        g * CPG + k0 < (unsigned int)p.c) {
        const int yy = (int)y - p.pad_y;
        const bool yin = yy >= 0 && yy < p.new_h;
        const int4 yt = yin ? p.ytab[yy] : make_int4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < PIX; ++i) {
            const unsigned int x = x0 + i;
            if (x < (unsigned int)p.w) {
                const int xx = (int)x - p.pad_x;
                const bool in = yin && xx >= 0 && xx < p.new_w;
                const int4 xt = in ? p.xtab[xx] : make_int4(0, 0, 0, 0);
#pragma unroll
                for (int j = 0; j < CH; ++j) {
                    const unsigned int ch = g * CPG + k0 + j;
                    if (ch < (unsigned int)p.c) {
                        float f;
                        if (in) {
                            const int so = pick_i(p.src_off, ch);
                            const int v = resample(p.src + yt.x + so, p.src + yt.y + so, xt, yt);
                            const float a = pick_f(p.alpha, ch), gm = pick_f(p.gamma, ch);
                            f = p.fused ? __fmaf_rn((float)v, a, gm) : __fadd_rn(__fmul_rn((float)v, a), gm);
                        } else {
                            f = pick_f(p.pad, ch);
                        }
                        put<ES, CB>(out, i * CH + j, f, p.scale);
                    }
                }
            }
        }
    }
    if (off + CB <= p.size) {
        if (CB == 16) {
            *reinterpret_cast<uint4*>(p.dst + off) = make_uint4(out.w[0], out.w[1 % (CB / 4)],
                                                                out.w[2 % (CB / 4)], out.w[3 % (CB / 4)]);
        } else if (CB == 8) {
            *reinterpret_cast<uint2*>(p.dst + off) = make_uint2(out.w[0], out.w[1 % (CB / 4)]);
        } else {
            *reinterpret_cast<unsigned int*>(p.dst + off) = out.w[0];
        }
    } else {  // the last, partial chunk of a buffer whose size is not a multiple of CB
#pragma unroll
        for (int b = 0; b < CB; ++b) {
            if (off + b < p.size) p.dst[off + b] = (unsigned char)(out.w[b / 4] >> (8 * (b % 4)));
        }
    }
}

// One kernel per compile: DLA_ES (element bytes), DLA_CPG (channels per pixel atom) and DLA_CB (bytes per
// thread) come from -D options, which keeps NVRTC time at startup to one instantiation.
#ifndef DLA_ES
#define DLA_ES 2
#endif
#ifndef DLA_CPG
#define DLA_CPG 1
#endif
#ifndef DLA_CB
#define DLA_CB 16
#endif
extern "C" __global__ void __launch_bounds__(256) dla_pack(const PackParams p) {
    pack_chunk<DLA_ES, DLA_CPG, DLA_CB>(p);
}
"""

SOURCE_SHA256 = hashlib.sha256(KERNEL_SOURCE.encode()).hexdigest()


class PackParams(ctypes.Structure):
    """Host mirror of the kernel's ``PackParams`` (passed by value; field order and types must match)."""

    _fields_ = [
        ("src", ctypes.c_uint64),
        ("xtab", ctypes.c_uint64),
        ("ytab", ctypes.c_uint64),
        ("dst", ctypes.c_uint64),
        ("size", ctypes.c_uint32),
        ("line", ctypes.c_uint32),
        ("surface", ctypes.c_uint32),
        ("batch", ctypes.c_uint32),
        ("line_m", ctypes.c_uint32),
        ("line_s", ctypes.c_uint32),
        ("surface_m", ctypes.c_uint32),
        ("surface_s", ctypes.c_uint32),
        ("batch_m", ctypes.c_uint32),
        ("batch_s", ctypes.c_uint32),
        ("n", ctypes.c_int32),
        ("groups", ctypes.c_int32),
        ("h", ctypes.c_int32),
        ("w", ctypes.c_int32),
        ("c", ctypes.c_int32),
        ("pad_x", ctypes.c_int32),
        ("pad_y", ctypes.c_int32),
        ("new_w", ctypes.c_int32),
        ("new_h", ctypes.c_int32),
        ("fused", ctypes.c_int32),
        ("src_off", ctypes.c_int32 * MAX_CHANNELS),
        ("alpha", ctypes.c_float * MAX_CHANNELS),
        ("gamma", ctypes.c_float * MAX_CHANNELS),
        ("pad", ctypes.c_float * MAX_CHANNELS),
        ("scale", ctypes.c_float),
    ]


# ---------------------------------------------------------------------------------------------------
# Host-side tables: OpenCV's INTER_LINEAR taps for 8-bit images, computed once per frame geometry.

def axis_taps(src: int, dst: int, clamp: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source indices ``(i0, i1)`` and fixed-point weights ``(w0, w1)`` for ``dst`` samples along one axis.

    ``clamp=True`` is OpenCV's column rule (weights zeroed at the borders), ``False`` its row rule
    (unclamped weights, indices clipped).
    """
    scale = 1.0 / (dst / src)  # OpenCV: scale_x = 1. / inv_scale_x, inv_scale_x = dst/src (double)
    f = ((np.arange(dst, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    s = np.floor(f)
    f = (f - s).astype(np.float32)
    i0 = s.astype(np.int64)
    if clamp:
        lo = i0 < 0
        f[lo], i0[lo] = 0.0, 0
        hi = i0 >= src - 1
        f[hi], i0[hi] = 0.0, src - 1
    one = np.float32(COEF_ONE)
    w0 = np.rint((np.float32(1.0) - f) * one).astype(np.int64)
    w1 = np.rint(f * one).astype(np.int64)
    i1 = np.clip(i0 + 1, 0, src - 1)
    return np.clip(i0, 0, src - 1), i1, w0, w1


def tap_tables(
    src_w: int, src_h: int, channels: int, new_w: int, new_h: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(xtab, ytab)`` as the kernel reads them: int32 ``(new_w, 4)`` and ``(new_h, 4)``.

    xtab rows are (byte offset of tap 0 in a row, of tap 1, a0, a1); ytab rows are (byte offset of row 0,
    of row 1, b0, b1) for a contiguous frame of ``src_w * channels`` bytes per row.
    """
    x0, x1, a0, a1 = axis_taps(src_w, new_w, clamp=True)
    y0, y1, b0, b1 = axis_taps(src_h, new_h, clamp=False)
    step = src_w * channels
    xtab = np.stack([x0 * channels, x1 * channels, a0, a1], axis=1).astype(np.int32)
    ytab = np.stack([y0 * step, y1 * step, b0, b1], axis=1).astype(np.int32)
    return np.ascontiguousarray(xtab), np.ascontiguousarray(ytab)


def emulate_resize(image: np.ndarray, new_w: int, new_h: int) -> np.ndarray:
    """The kernel's integer resize in numpy: ``(H, W, C)`` uint8 -> ``(new_h, new_w, C)`` uint8 (tests)."""
    h, w, c = image.shape
    xtab, ytab = tap_tables(w, h, c, new_w, new_h)
    flat = np.ascontiguousarray(image).reshape(-1).astype(np.int64)
    ch = np.arange(c)
    cols0 = xtab[:, 0, None] + ch  # (new_w, C)
    cols1 = xtab[:, 1, None] + ch

    def hpass(rows: np.ndarray) -> np.ndarray:
        base = rows[:, None, None]
        return flat[base + cols0] * xtab[:, 2, None] + flat[base + cols1] * xtab[:, 3, None]

    h0 = hpass(ytab[:, 0].astype(np.int64))
    h1 = hpass(ytab[:, 1].astype(np.int64))
    v = (((h0 >> 4) * ytab[:, 2, None, None]) >> 16) + (((h1 >> 4) * ytab[:, 3, None, None]) >> 16)
    return np.clip((v + 2) >> 2, 0, 255).astype(np.uint8)


def divisor_magic(d: int) -> tuple[int, int]:
    """``(m, s)`` with ``n // d == (n * m >> 32) >> s`` for every ``0 <= n < 2**31`` (``2 <= d < 2**31``).

    Granlund-Montgomery round-up method: with ``p = 31 + ceil(log2 d)`` and ``m = ceil(2**p / d)`` the
    error ``m*d - 2**p < d`` adds less than ``2**(31-p) <= 1/d`` to ``n/d``, too little to cross an integer.
    """
    if not 2 <= d < 2**31:
        raise ValueError(f"divisor {d} out of range")
    p = 31 + (d - 1).bit_length()
    m = -(-(1 << p) // d)
    assert m < 2**32
    return m, p - 32


def launch_geometry(size: int, chunk_bytes: int) -> tuple[int, int]:
    """``(blocks, threads)`` covering ``size`` bytes with one ``chunk_bytes`` chunk per thread."""
    chunks = -(-int(size) // chunk_bytes)
    return max(1, -(-chunks // BLOCK_THREADS)), BLOCK_THREADS
