"""The fused preprocessing kernel: CUDA C source, its parameter block, and the host-side tap tables.

Kept free of CUDA imports so that CI (no GPU) can test the arithmetic, compile the source with nvcc and
run it on the host (``test/backends/test_gpu_preprocess_cpu.py``).

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

How the work is split: a thread owns a chunk of an item's first surface (``CHUNK_BYTES``) and writes it
in every surface of the item, so in a linear tensor one thread computes all three channels of its pixels
and stores them to the three planes: each output pixel's source pixels are read and converted once, not
once per plane. A tap of weight 0 adds nothing to OpenCV's sum, so it is not read (at an exact integer
ratio, e.g. 1080p -> 640x360, every second tap in both directions has weight 0); skipping it leaves the
result bit for bit the same.

Camera encodings are read as they come, in the same pass: each tap of an output sample is converted to
8-bit RGB where it is read, exactly as cv_bridge converts the whole frame before the CPU path resizes it,
so the result is the same bytes with no RGB frame in between. One kernel per source family
(``FAMILIES``) in each module:

- 16-bit RGB/BGR(A)/mono: ``(v + 128) / 257`` per sample (cv_bridge's ``convertTo`` by 255/65535 rounds
  to nearest and never meets a tie), big-endian samples byte-swapped first;
- YUYV/UYVY and NV12/NV21: OpenCV's BT.601 limited-range conversion in its 20-bit fixed point
  (``COLOR_YUV2RGB_*``), chroma taken from the pixel pair / 2x2 block the pixel belongs to;
- Bayer: OpenCV's bilinear demosaic (rounded means of the 2 or 4 nearest samples of each missing colour;
  border rows/columns copy their inner neighbour; frames under 3x3 are zeros), computed for the four taps
  from one 4x4 window of samples; 16-bit mosaics are demosaiced in 16 bit, then scaled, as cv_bridge does.

All three match OpenCV bit for bit (``test/backends/test_gpu_preprocess_cpu.py`` checks the numpy twins
below against ``cv2.cvtColor`` and runs the kernel source on the host; the GPU tests run it on a GPU).
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

import numpy as np

COEF_BITS = 11  # OpenCV's INTER_RESIZE_COEF_BITS
COEF_ONE = 1 << COEF_BITS
STRIDE_ALIGN = 16  # line/surface/batch strides must be multiples of this (every chunk size divides it)
BLOCK_THREADS = 256
MAX_CHANNELS = 4

KERNEL_NAME = "dla_pack"  # the packed 8-bit family (rgb8, bgr8, rgba8, bgra8, mono8)
# source family -> its kernel in every module (see the end of KERNEL_SOURCE)
FAMILIES = ("packed8", "packed16", "yuv422", "nv", "bayer8", "bayer16")
KERNEL_NAMES: dict[str, str] = {f: KERNEL_NAME if f == "packed8" else f"{KERNEL_NAME}_{f}" for f in FAMILIES}
PACKED_FAMILIES = ("packed8", "packed16")
# (element bytes, channels per pixel atom) -> bytes each thread writes per surface. Instantiated for linear
# (1), hwc4 (C' = 1 is addressed like a one-plane linear tensor, C' = 4), chw16 (fp16), chw32 (int8).
# A linear thread writes its chunk in each of the three planes, so its chunk holds 2 pixels (6 elements in
# all, one conversion per pixel). hwc4 chunks hold 1-2 pixels: with 16-byte chunks everywhere the linear
# and hwc4 kernels had too few threads to hide latency on an H200 (linear int8 reached 22 % of copy
# bandwidth); chw chunks are mostly pad channels, so they stay 16 bytes wide.
CHUNK_BYTES: dict[tuple[int, int], int] = {
    (2, 1): 4, (1, 1): 2, (2, 4): 8, (1, 4): 8, (2, 16): 16, (1, 32): 16,
}
VARIANTS = tuple(CHUNK_BYTES)

KERNEL_SOURCE = r"""
// Fused source conversion + letterbox + bilinear resize + channel order + normalisation + fp16/int8 + DLA
// layout. Each thread owns one aligned chunk position of a batch item's first surface and writes it in
// every surface of the item (the three planes of a linear tensor: each source pixel is converted once, not
// once per plane); threads past the first surface write the item's slack and the buffer's tail as zeros,
// so no byte of the buffer is left stale. Written for NVRTC: no headers.

struct PackParams {
    const unsigned char* src;   // frame in device staging, rows of src_step bytes
    const int4* xtab;           // new_w entries: (tap0, tap1, a0, a1); taps in bytes (packed) or pixels
    const int4* ytab;           // new_h entries: (row0, row1, b0, b1); rows in bytes (packed) or pixels
    unsigned char* dst;         // DLA input buffer
    unsigned int size;          // bytes of dst to write
    unsigned int line;          // byte strides: line, surface, batch (multiples of 16)
    unsigned int surface;
    unsigned int batch;
    unsigned int span;          // thread bytes per batch item: batch - (groups - 1) * surface
    unsigned int work;          // thread bytes in all: n * span + the tail past n * batch
    unsigned int line_m, line_s;        // n / d == umulhi(n, m) >> s for n < 2^31 (host-computed)
    unsigned int span_m, span_s;
    int n, groups, h, w, c;     // groups: planes (linear), 1 (hwc4), ceil(C/V) (chw16/chw32); C <= 3
    int pad_x, pad_y, new_w, new_h;
    int fused;                  // 1: fma like the CPU path's SIMD loop, 0: its scalar loop (mul, add)
    int src_off[4];             // per model channel: byte offset in a pixel (packed) or R/G/B index (0-2)
    float alpha[4];             // x = fma(pixel, alpha, gamma)
    float gamma[4];
    float pad[4];               // normalised pad value
    float scale;                // int8 calibration scale
    int src_step;               // bytes per staged source row
    int src_w, src_h;           // source frame in pixels
    int src_px;                 // bytes per source pixel (packed families)
    int swap;                   // 1: 16-bit samples are big-endian
    int yuv_off[4];             // YUV: byte offset of Y within a pixel, of U and V within a pair / NV row
    int bayer;                  // Bayer: colour (0 R, 1 G, 2 B) of site (y&1, x&1) in bits 2*(2*(y&1)+(x&1))
};

__device__ __forceinline__ int pick3(int3 v, int k) {
    return k == 0 ? v.x : (k == 1 ? v.y : v.z);
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
    unsigned int w[(CB + 3) / 4];
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

// One chunk at byte `off` of dst with one store; bytes at or past `size` are not written.
template <int CB>
__device__ __forceinline__ void store(const PackParams& p, unsigned int off, const Chunk<CB>& out) {
    if (off + CB <= p.size) {
        if (CB == 16) {
            *reinterpret_cast<uint4*>(p.dst + off) = make_uint4(out.w[0], out.w[1 % ((CB + 3) / 4)],
                                                                out.w[2 % ((CB + 3) / 4)],
                                                                out.w[3 % ((CB + 3) / 4)]);
        } else if (CB == 8) {
            *reinterpret_cast<uint2*>(p.dst + off) = make_uint2(out.w[0], out.w[1 % ((CB + 3) / 4)]);
        } else if (CB == 4) {
            *reinterpret_cast<unsigned int*>(p.dst + off) = out.w[0];
        } else if (CB == 2) {
            *reinterpret_cast<unsigned short*>(p.dst + off) = (unsigned short)out.w[0];
        } else {
            p.dst[off] = (unsigned char)out.w[0];
        }
    } else {  // the last, partial chunk of a buffer whose size is not a multiple of CB
#pragma unroll
        for (int b = 0; b < CB; ++b) {
            if (off + b < p.size) p.dst[off + b] = (unsigned char)(out.w[b / 4] >> (8 * (b % 4)));
        }
    }
}

// OpenCV's 8-bit INTER_LINEAR for one output sample from its four taps (see the Python module docstring).
__device__ __forceinline__ int lerp2(int v00, int v01, int v10, int v11, int4 xt, int4 yt) {
    const int h0 = v00 * xt.z + v01 * xt.w;
    const int h1 = v10 * xt.z + v11 * xt.w;
    const int v = (((h0 >> 4) * yt.z) >> 16) + (((h1 >> 4) * yt.w) >> 16);
    return min(max((v + 2) >> 2, 0), 255);
}

// cv_bridge's 16 -> 8 bit: convertTo(CV_8U, 255/65535) == round(v / 257), never a tie for integers
__device__ __forceinline__ int to8(unsigned int v) {
    return (int)((v + 128u) / 257u);
}

__device__ __forceinline__ unsigned int swap16(unsigned int v, int swap) {
    return swap ? (((v & 0xffu) << 8) | (v >> 8)) : v;
}

__device__ __forceinline__ unsigned int load16(const unsigned char* q, int swap) {
    return swap16(__ldg(reinterpret_cast<const unsigned short*>(q)), swap);
}

// Source families. Packed ones (rgb/bgr/rgba/bgra/mono, 8 and 16 bit) are read through byte-offset tap
// tables; the others convert a whole pixel to RGB (pixel-index tap tables).
#define SRC_PACKED8 0
#define SRC_PACKED16 1
#define SRC_YUV422 2
#define SRC_NV 3
#define SRC_BAYER8 4
#define SRC_BAYER16 5

// The model channels of the packed pixel at q: 4- and 8-byte pixels (rgba/bgra) in one aligned load,
// mono in one, rgb/bgr one sample at a time (3- and 6-byte pixels are not aligned for a wider load).
template <int SRC>
__device__ __forceinline__ int3 packed_pixel(const PackParams& p, const unsigned char* q) {
    const int s0 = p.src_off[0], s1 = p.src_off[1], s2 = p.src_off[2];
    if (SRC == SRC_PACKED8) {
        if (p.src_px == 4) {
            const unsigned int u = __ldg(reinterpret_cast<const unsigned int*>(q));
            return make_int3((u >> (8 * s0)) & 0xffu, (u >> (8 * s1)) & 0xffu, (u >> (8 * s2)) & 0xffu);
        }
        if (p.src_px == 1) {
            const int v = __ldg(q);
            return make_int3(v, v, v);
        }
        return make_int3(__ldg(q + s0), __ldg(q + s1), __ldg(q + s2));
    } else {  // 16 bit: to 8 bit first, as cv_bridge does before anything else sees the frame
        if (p.src_px == 8) {
            const uint2 u = __ldg(reinterpret_cast<const uint2*>(q));
            const unsigned long long v = ((unsigned long long)u.y << 32) | u.x;  // little-endian device
            return make_int3(to8(swap16((unsigned int)(v >> (8 * s0)) & 0xffffu, p.swap)),
                             to8(swap16((unsigned int)(v >> (8 * s1)) & 0xffffu, p.swap)),
                             to8(swap16((unsigned int)(v >> (8 * s2)) & 0xffffu, p.swap)));
        }
        if (p.src_px == 2) {
            const int v = to8(load16(q, p.swap));
            return make_int3(v, v, v);
        }
        return make_int3(to8(load16(q + s0, p.swap)), to8(load16(q + s1, p.swap)),
                         to8(load16(q + s2, p.swap)));
    }
}

// OpenCV's YUV -> RGB (BT.601 limited range, 20-bit fixed point), as cvtColor COLOR_YUV2RGB_* computes it
__device__ __forceinline__ int3 yuv_rgb(int y, int u, int v) {
    const int yy = max(y - 16, 0) * 1220542 + (1 << 19);
    u -= 128;
    v -= 128;
    return make_int3(min(max((yy + 1673527 * v) >> 20, 0), 255),
                     min(max((yy - 852492 * v - 409993 * u) >> 20, 0), 255),
                     min(max((yy + 2116026 * u) >> 20, 0), 255));
}

template <int SRC>
__device__ __forceinline__ int3 yuv_pixel(const PackParams& p, int x, int y) {
    const unsigned char* row = p.src + y * p.src_step;
    const unsigned char* chroma;
    int luma;
    if (SRC == SRC_YUV422) {  // Y0 U Y1 V (YUYV) or U Y0 V Y1 (UYVY): one U and V per pixel pair
        luma = __ldg(row + 2 * x + p.yuv_off[0]);
        chroma = row + 4 * (x >> 1);
    } else {  // NV12/NV21: full-size Y plane, then H/2 rows of interleaved chroma per 2x2 block
        luma = __ldg(row + x);
        chroma = p.src + (p.src_h + (y >> 1)) * p.src_step + (x & ~1);
    }
    return yuv_rgb(luma, __ldg(chroma + p.yuv_off[1]), __ldg(chroma + p.yuv_off[2]));
}

template <int SRC>
__device__ __forceinline__ int bayer_load(const PackParams& p, int x, int y) {
    const unsigned char* row = p.src + y * p.src_step;
    return SRC == SRC_BAYER8 ? (int)__ldg(row + x) : (int)load16(row + 2 * x, p.swap);
}

// OpenCV's bilinear demosaic at one site from its 3x3 neighbourhood w[r][c] (centre w[1][1]): the own
// colour as is, the others as rounded means of the 2 or 4 nearest samples of that colour.
__device__ __forceinline__ int3 demosaic(const int w[3][3], int site, int right) {
    const int hor = (w[1][0] + w[1][2] + 1) >> 1;
    const int ver = (w[0][1] + w[2][1] + 1) >> 1;
    const int crs = (w[1][0] + w[1][2] + w[0][1] + w[2][1] + 2) >> 2;
    const int dia = (w[0][0] + w[0][2] + w[2][0] + w[2][2] + 2) >> 2;
    const int c = w[1][1];
    if (site == 0) return make_int3(c, crs, dia);
    if (site == 2) return make_int3(dia, crs, c);
    return right == 0 ? make_int3(hor, c, ver) : make_int3(ver, c, hor);  // green: R beside it or above
}

__device__ __forceinline__ int bayer_site(int code, int x, int y) {
    return (code >> (2 * (2 * (y & 1) + (x & 1)))) & 3;
}

// The four taps' RGB. OpenCV demosaics rows/columns 1..size-2 and copies them onto the border, i.e. a
// border pixel takes the value of the nearest interior one; frames narrower or lower than 3 are zeros.
// Adjacent taps share one 4x4 window of samples (16 loads instead of 36); without the second column
// (COL1) and row (ROW1) it is 3x3 and one demosaic.
template <int SRC, bool COL1, bool ROW1>
__device__ __forceinline__ void bayer_taps(const PackParams& p, int4 xt, int4 yt, int3 t[4]) {
    const int W = p.src_w, H = p.src_h;
    if (W < 3 || H < 3) {
        t[0] = t[1] = t[2] = t[3] = make_int3(0, 0, 0);
        return;
    }
    const int x0 = min(max(xt.x, 1), W - 2), x1 = min(max(xt.y, 1), W - 2);
    const int y0 = min(max(yt.x, 1), H - 2), y1 = min(max(yt.y, 1), H - 2);
    int win[4][4];
#pragma unroll
    for (int r = 0; r < (ROW1 ? 4 : 3); ++r) {
        const int yy = min(y0 - 1 + r, H - 1);
#pragma unroll
        for (int c = 0; c < (COL1 ? 4 : 3); ++c) win[r][c] = bayer_load<SRC>(p, min(x0 - 1 + c, W - 1), yy);
    }
#pragma unroll
    for (int j = 0; j < (ROW1 ? 2 : 1); ++j) {
#pragma unroll
        for (int i = 0; i < (COL1 ? 2 : 1); ++i) {
            int w[3][3];
#pragma unroll
            for (int r = 0; r < 3; ++r) {
#pragma unroll
                for (int c = 0; c < 3; ++c) w[r][c] = win[j + r][i + c];
            }
            const int x = x0 + i, y = y0 + j;
            int3 v = demosaic(w, bayer_site(p.bayer, x, y), bayer_site(p.bayer, x + 1, y));
            if (SRC == SRC_BAYER16) v = make_int3(to8(v.x), to8(v.y), to8(v.z));  // demosaic, then scale
            t[2 * j + i] = v;
        }
    }
    // a tap clamped onto its neighbour (x1 == x0 or y1 == y0) repeats it
    if (COL1 && x1 == x0) { t[1] = t[0]; t[3] = t[2]; }
    if (ROW1 && y1 == y0) { t[2] = t[0]; t[3] = t[1]; }
}

// The tap pixel at column tap x, row tap y: packed families take byte offsets, the others pixel indices.
template <int SRC>
__device__ __forceinline__ int3 tap_pixel(const PackParams& p, int x, int y) {
    if (SRC == SRC_PACKED8 || SRC == SRC_PACKED16) return packed_pixel<SRC>(p, p.src + y + x);
    return yuv_pixel<SRC>(p, x, y);
}

// OpenCV's resample of one output pixel from the taps it weights: without the second column (COL1 false:
// its weight is 0) or row (ROW1), those taps are neither read nor converted and count as 0, which is what
// they add to OpenCV's sum. The result is the same bytes.
template <int SRC, bool COL1, bool ROW1>
__device__ __forceinline__ int3 resample(const PackParams& p, int4 xt, int4 yt) {
    int3 t[4];
    t[1] = t[2] = t[3] = make_int3(0, 0, 0);
    if (SRC == SRC_BAYER8 || SRC == SRC_BAYER16) {
        bayer_taps<SRC, COL1, ROW1>(p, xt, yt, t);
    } else {
        t[0] = tap_pixel<SRC>(p, xt.x, yt.x);
        if (COL1) t[1] = tap_pixel<SRC>(p, xt.y, yt.x);
        if (ROW1) t[2] = tap_pixel<SRC>(p, xt.x, yt.y);
        if (COL1 && ROW1) t[3] = tap_pixel<SRC>(p, xt.y, yt.y);
    }
    return make_int3(lerp2(t[0].x, t[1].x, t[2].x, t[3].x, xt, yt),
                     lerp2(t[0].y, t[1].y, t[2].y, t[3].y, xt, yt),
                     lerp2(t[0].z, t[1].z, t[2].z, t[3].z, xt, yt));
}

// The resampled value of each model channel (0-2) of one output pixel, every family. A second tap of weight
// 0 is skipped (at an exact integer ratio such as 1080p -> 640x360 both are, and one tap is read instead
// of four); each case is its own straight code, so the general one keeps its registers.
template <int SRC>
__device__ __forceinline__ int3 sample_pixel(const PackParams& p, int4 xt, int4 yt) {
    int3 v;
    if (yt.w != 0) {
        v = xt.w != 0 ? resample<SRC, true, true>(p, xt, yt) : resample<SRC, false, true>(p, xt, yt);
    } else {
        v = xt.w != 0 ? resample<SRC, true, false>(p, xt, yt) : resample<SRC, false, false>(p, xt, yt);
    }
    if (SRC == SRC_PACKED8 || SRC == SRC_PACKED16) return v;  // already in model order (src_off)
    return make_int3(pick3(v, p.src_off[0]), pick3(v, p.src_off[1]), pick3(v, p.src_off[2]));
}

template <int ES, int CPG, int CB, int SRC>
__device__ __forceinline__ void pack_chunk(const PackParams& p) {
    constexpr int EPC = CB / ES;                      // elements per chunk
    constexpr int PIX = EPC >= CPG ? EPC / CPG : 1;   // pixels per chunk
    constexpr int CH = EPC >= CPG ? CPG : EPC;        // channel slots per pixel in one chunk
    constexpr int GROUPS = CPG == 1 ? 3 : 1;          // surfaces a thread writes: the planes of linear
    // A chunk holding a real channel starts at channel 0 of its atom, so channel indices are constants.
    static_assert(EPC >= CPG ? EPC % CPG == 0 : EPC >= 4, "chunk does not start at channel 0");
    const unsigned int v = (blockIdx.x * blockDim.x + threadIdx.x) * (unsigned int)CB;
    if (v >= p.work) return;
    Chunk<CB> zero;
#pragma unroll
    for (int k = 0; k < (CB + 3) / 4; ++k) zero.w[k] = 0u;
    const unsigned int n = min(fast_div(v, p.span_m, p.span_s), (unsigned int)p.n);
    const unsigned int r = v - n * p.span;
    const unsigned int base = n * p.batch + r;
    if (n == (unsigned int)p.n) {  // the tail past the last batch item
        store<CB>(p, base, zero);
        return;
    }
    if (r >= p.surface) {  // the item's slack past its last surface
        store<CB>(p, base + (p.groups - 1) * p.surface, zero);
        return;
    }
    const unsigned int y = fast_div(r, p.line_m, p.line_s);
    const unsigned int e0 = (r - y * p.line) / ES;    // first element of the chunk within its line
    const unsigned int x0 = e0 / CPG;
    // rows past H and chunks of pad channels only stay zero (in every surface)
    const bool real = y < (unsigned int)p.h && e0 % CPG == 0;
    const int yy = (int)y - p.pad_y;
    const bool yin = real && yy >= 0 && yy < p.new_h;
    const int4 yt = yin ? p.ytab[yy] : make_int4(0, 0, 0, 0);
    int3 px[PIX];  // the model channels of each pixel, converted once for all surfaces
    bool inside[PIX];
#pragma unroll
    for (int i = 0; i < PIX; ++i) {
        const int xx = (int)(x0 + i) - p.pad_x;
        inside[i] = yin && x0 + i < (unsigned int)p.w && xx >= 0 && xx < p.new_w;
        px[i] = inside[i] ? sample_pixel<SRC>(p, p.xtab[xx], yt) : make_int3(0, 0, 0);
    }
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        if (g < p.groups) {
            Chunk<CB> out = zero;
            if (real) {
#pragma unroll
                for (int i = 0; i < PIX; ++i) {
#pragma unroll
                    for (int j = 0; j < CH; ++j) {
                        const int ch = g * CPG + j;
                        if (ch < 3 && ch < p.c && x0 + i < (unsigned int)p.w) {
                            float f;
                            if (inside[i]) {
                                const float a = p.alpha[ch], gm = p.gamma[ch];
                                const float s = (float)pick3(px[i], ch);
                                f = p.fused ? __fmaf_rn(s, a, gm) : __fadd_rn(__fmul_rn(s, a), gm);
                            } else {
                                f = p.pad[ch];
                            }
                            put<ES, CB>(out, i * CH + j, f, p.scale);
                        }
                    }
                }
            }
            store<CB>(p, base + g * p.surface, out);
        }
    }
}

// One module per destination variant: DLA_ES (element bytes), DLA_CPG (channels per pixel atom) and DLA_CB
// (bytes per thread) come from -D options; it holds one kernel per source family, so that a family's
// conversion costs nothing to the others (registers, occupancy).
#ifndef DLA_ES
#define DLA_ES 2
#endif
#ifndef DLA_CPG
#define DLA_CPG 1
#endif
#ifndef DLA_CB
#define DLA_CB 4
#endif
#define DLA_KERNEL(name, src) \
    extern "C" __global__ void __launch_bounds__(256) name(const PackParams p) { \
        pack_chunk<DLA_ES, DLA_CPG, DLA_CB, src>(p); \
    }
DLA_KERNEL(dla_pack, SRC_PACKED8)
DLA_KERNEL(dla_pack_packed16, SRC_PACKED16)
DLA_KERNEL(dla_pack_yuv422, SRC_YUV422)
DLA_KERNEL(dla_pack_nv, SRC_NV)
DLA_KERNEL(dla_pack_bayer8, SRC_BAYER8)
DLA_KERNEL(dla_pack_bayer16, SRC_BAYER16)
"""

SOURCE_SHA256 = hashlib.sha256(KERNEL_SOURCE.encode()).hexdigest()


def _same_type(ctype: Any, *names: str) -> list[tuple[str, Any]]:
    """Consecutive struct fields of one C type, in the order given."""
    return [(name, ctype) for name in names]


_I32, _U32, _U64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64
_I32_CH, _F32_CH = ctypes.c_int32 * MAX_CHANNELS, ctypes.c_float * MAX_CHANNELS


class PackParams(ctypes.Structure):
    """Host mirror of the kernel's ``PackParams`` (passed by value; field order and types must match)."""

    _fields_ = [
        *_same_type(_U64, "src", "xtab", "ytab", "dst"),
        *_same_type(_U32, "size", "line", "surface", "batch", "span", "work", "line_m", "line_s", "span_m",
                    "span_s"),
        *_same_type(_I32, "n", "groups", "h", "w", "c", "pad_x", "pad_y", "new_w", "new_h", "fused"),
        ("src_off", _I32_CH),
        *_same_type(_F32_CH, "alpha", "gamma", "pad"),
        ("scale", ctypes.c_float),
        *_same_type(_I32, "src_step", "src_w", "src_h", "src_px", "swap"),
        ("yuv_off", _I32_CH),
        ("bayer", _I32),
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
    src_w: int, src_h: int, channels: int, new_w: int, new_h: int, row_bytes: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(xtab, ytab)`` as the kernel reads them: int32 ``(new_w, 4)`` and ``(new_h, 4)``.

    xtab rows are (offset of tap 0 in a row, of tap 1, a0, a1); ytab rows are (offset of row 0, of row 1,
    b0, b1). Offsets are ``index * channels`` and ``row * row_bytes`` (default ``src_w * channels``): byte
    offsets for the packed families, plain pixel indices (``channels = row_bytes = 1``) for the others.
    """
    x0, x1, a0, a1 = axis_taps(src_w, new_w, clamp=True)
    y0, y1, b0, b1 = axis_taps(src_h, new_h, clamp=False)
    step = src_w * channels if row_bytes is None else row_bytes
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
        second = np.where(xtab[:, 3, None] != 0, flat[base + cols1], 0)  # a tap of weight 0 is not read
        return flat[base + cols0] * xtab[:, 2, None] + second * xtab[:, 3, None]

    h0 = hpass(ytab[:, 0].astype(np.int64))
    h1 = np.where(ytab[:, 3, None, None] != 0, hpass(ytab[:, 1].astype(np.int64)), 0)  # nor a row
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


def chunk_plan(elem_size: int, channels_per_atom: int, chunk_bytes: int) -> tuple[int, int, int]:
    """``(pixels, channel slots per pixel, surfaces)`` of one thread's chunk, as ``pack_chunk`` derives them.

    A chunk that holds a real channel starts at channel 0 of its atom (the kernel asserts it).
    """
    epc = chunk_bytes // elem_size
    whole = epc >= channels_per_atom  # whole atoms (pixels) per chunk, else part of one atom
    fits = epc % channels_per_atom == 0 if whole else epc >= MAX_CHANNELS
    if not fits or STRIDE_ALIGN % chunk_bytes:
        raise ValueError(f"chunk of {chunk_bytes} bytes does not fit atoms of {channels_per_atom} x "
                         f"{elem_size} bytes")
    pixels, slots = (epc // channels_per_atom, channels_per_atom) if whole else (1, epc)
    return pixels, slots, 3 if channels_per_atom == 1 else 1


def thread_span(size: int, n: int, groups: int, surface: int, batch: int) -> tuple[int, int]:
    """``(span, work)``: thread bytes per batch item and in all (``PackParams.span`` and ``.work``).

    A thread owns a chunk of an item's first surface and writes it in every surface of the item, so an
    item takes ``batch - (groups - 1) * surface`` bytes of thread space; the tail past ``n * batch`` (if
    ``size`` has one) is written chunk by chunk.
    """
    span = batch - (groups - 1) * surface
    return span, n * span + max(0, size - n * batch)


def launch_geometry(work: int, chunk_bytes: int) -> tuple[int, int]:
    """``(blocks, threads)``: one chunk per thread over ``work`` thread bytes (:func:`thread_span`)."""
    chunks = -(-int(work) // chunk_bytes)
    return max(1, -(-chunks // BLOCK_THREADS)), BLOCK_THREADS


# ---------------------------------------------------------------------------------------------------
# The kernel's per-pixel source conversions in numpy (tests compare them with cv2.cvtColor). Resizing the
# converted frame with emulate_resize is what the kernel computes: it converts each tap pixel exactly so.

def to8(v: np.ndarray) -> np.ndarray:
    """16 -> 8 bit as cv_bridge (``convertTo(CV_8U, 255/65535)``, round to nearest: no ties for integers)."""
    return ((v.astype(np.int64) + 128) // 257).astype(np.uint8)


def yuv_rgb(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """OpenCV's BT.601 limited-range YUV -> RGB in 20-bit fixed point; ``(..., 3)`` uint8."""
    yy = np.maximum(y.astype(np.int64) - 16, 0) * 1220542 + (1 << 19)
    uu, vv = u.astype(np.int64) - 128, v.astype(np.int64) - 128
    rgb = np.stack([yy + 1673527 * vv, yy - 852492 * vv - 409993 * uu, yy + 2116026 * uu], axis=-1) >> 20
    return np.clip(rgb, 0, 255).astype(np.uint8)


def emulate_demosaic(raw: np.ndarray, site: tuple[int, ...]) -> np.ndarray:
    """OpenCV's bilinear demosaic as the kernel does it; ``site`` = colour (0 R, 1 G, 2 B) of the sites
    (0, 0), (0, 1), (1, 0), (1, 1) as (row, column) parity. Returns ``(H, W, 3)`` in the input's depth."""
    h, w = raw.shape
    out = np.zeros((h, w, 3), np.int64)
    if h < 3 or w < 3:
        return out
    r = np.pad(raw.astype(np.int64), 1, mode="edge")  # only reached at the clamped border, values unused
    ys = np.clip(np.arange(h), 1, h - 2)[:, None] + 1
    xs = np.clip(np.arange(w), 1, w - 2)[None, :] + 1

    def at(dy: int, dx: int) -> np.ndarray:
        return r[ys + dy, xs + dx]

    hor = (at(0, -1) + at(0, 1) + 1) >> 1
    ver = (at(-1, 0) + at(1, 0) + 1) >> 1
    crs = (at(0, -1) + at(0, 1) + at(-1, 0) + at(1, 0) + 2) >> 2
    dia = (at(-1, -1) + at(-1, 1) + at(1, -1) + at(1, 1) + 2) >> 2
    c = at(0, 0)
    table = np.array(site).reshape(2, 2)
    s = table[(ys - 1) % 2, (xs - 1) % 2]
    right = table[(ys - 1) % 2, xs % 2]
    out[..., 0] = np.select([s == 0, s == 2, right == 0], [c, dia, hor], ver)
    out[..., 1] = np.where(s == 1, c, crs)
    out[..., 2] = np.select([s == 2, s == 0, right == 0], [c, dia, ver], hor)
    return out
