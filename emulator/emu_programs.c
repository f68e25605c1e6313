/* DLA EMULATOR (test infrastructure): the two programs an emulated loadable can run on the host.
 *   echo   - output i = input min(i, last) read and written through the declared layouts
 *   oracle - finds solid-coloured axis-aligned rectangles in input 0 and writes them as YOLOv5 raw heads
 *            (one output per stride) or as one "final" table [cx, cy, w, h, obj, one-hot classes]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define MAX_BOXES 256

typedef struct { float x0, y0, x1, y1; int cls; } box_t;

static void echo(const emu_loadable *l, uint8_t *const *in, uint8_t *const *out) {
    for (uint32_t i = 0; i < l->num_outputs; i++) {
        const emu_tensor *o = &l->outputs[i];
        const emu_tensor *s = &l->inputs[i < l->num_inputs ? i : l->num_inputs - 1];
        const uint8_t *src = in[i < l->num_inputs ? i : l->num_inputs - 1];
        memset(out[i], 0, o->desc.size);
        for (uint64_t n = 0; n < o->desc.n && n < s->desc.n; n++)
            for (uint64_t c = 0; c < o->desc.c && c < s->desc.c; c++)
                for (uint64_t h = 0; h < o->desc.h && h < s->desc.h; h++)
                    for (uint64_t w = 0; w < o->desc.w && w < s->desc.w; w++)
                        emu_write(o, out[i], n, c, h, w, emu_read(s, src, n, c, h, w));
    }
}

static int match(const emu_oracle_params *o, const uint8_t *px) {
    for (uint32_t k = 0; k < o->num_classes; k++) {
        int ok = 1;
        for (int ch = 0; ch < 3; ch++) {
            int d = (int)px[ch] - (int)o->colours[k][ch];
            if (d < 0) d = -d;
            if ((uint32_t)d > o->tolerance) { ok = 0; break; }
        }
        if (ok) return (int)k;
    }
    return -1;
}

static int find_boxes(const emu_loadable *l, const uint8_t *in, box_t *boxes) {
    const emu_tensor *t = &l->inputs[0];
    const emu_oracle_params *o = &l->oracle;
    uint64_t H = t->desc.h, W = t->desc.w;
    uint8_t *rgb = malloc(H * W * 3), *seen = calloc(H * W, 1);
    int *cls = malloc(H * W * sizeof(int));
    int nb = 0;
    if (!rgb || !seen || !cls) goto done;
    for (uint64_t y = 0; y < H; y++)
        for (uint64_t x = 0; x < W; x++) {
            for (int c = 0; c < 3; c++) {
                float v = emu_read(t, in, 0, (uint64_t)c, y, x) * o->std[c] + o->mean[c];
                float r = rintf(v);
                int idx = o->bgr ? 2 - c : c; /* network channel c -> R, G, B position */
                rgb[(y * W + x) * 3 + idx] = (uint8_t)(r < 0 ? 0 : (r > 255 ? 255 : r));
            }
            cls[y * W + x] = match(o, &rgb[(y * W + x) * 3]);
        }
    for (uint64_t y = 0; y < H; y++)
        for (uint64_t x = 0; x < W; x++) {
            int k = cls[y * W + x];
            if (k < 0 || seen[y * W + x]) continue;
            uint64_t x1 = x;
            while (x1 < W && cls[y * W + x1] == k && !seen[y * W + x1]) x1++;
            uint64_t y1 = y + 1;
            for (; y1 < H; y1++) {
                int full = 1;
                for (uint64_t xx = x; xx < x1; xx++)
                    if (cls[y1 * W + xx] != k || seen[y1 * W + xx]) { full = 0; break; }
                if (!full) break;
            }
            for (uint64_t yy = y; yy < y1; yy++) memset(&seen[yy * W + x], 1, x1 - x);
            if (x1 - x >= o->min_size && y1 - y >= o->min_size && nb < MAX_BOXES) {
                boxes[nb].x0 = (float)x; boxes[nb].y0 = (float)y;
                boxes[nb].x1 = (float)x1; boxes[nb].y1 = (float)y1; boxes[nb].cls = k; nb++;
            }
        }
done:
    free(rgb); free(seen); free(cls);
    return nb;
}

static float logit(float p) {
    if (p < 1e-4f) p = 1e-4f;
    if (p > 1.0f - 1e-4f) p = 1.0f - 1e-4f;
    return logf(p / (1.0f - p));
}

/* Inverse of the YOLOv5 decode: pick the (stride, anchor) whose anchor fits the box best, then the cell
 * holding the centre, and write logits that decode back to the box. */
static void write_raw(const emu_loadable *l, uint8_t *const *out, const box_t *b, int nb) {
    const emu_oracle_params *o = &l->oracle;
    uint32_t per = 5 + o->num_classes, na = o->num_anchors;
    for (uint32_t i = 0; i < l->num_outputs; i++) {
        const emu_tensor *t = &l->outputs[i];
        memset(out[i], 0, t->desc.size);
        for (uint32_t a = 0; a < na; a++)
            for (uint32_t k = 4; k < per; k++)
                for (uint64_t y = 0; y < t->desc.h; y++)
                    for (uint64_t x = 0; x < t->desc.w; x++)
                        emu_write(t, out[i], 0, a * per + k, y, x, o->logit_neg);
    }
    for (int j = 0; j < nb; j++) {
        float cx = 0.5f * (b[j].x0 + b[j].x1), cy = 0.5f * (b[j].y0 + b[j].y1);
        float bw = b[j].x1 - b[j].x0, bh = b[j].y1 - b[j].y0;
        int best_i = -1, best_a = -1;
        float best = 1e30f;
        for (uint32_t i = 0; i < l->num_outputs; i++)
            for (uint32_t a = 0; a < na; a++) {
                float rw = bw / o->anchors[i][a][0], rh = bh / o->anchors[i][a][1];
                if (rw <= 0.07f || rw >= 3.9f || rh <= 0.07f || rh >= 3.9f) continue;
                float cost = fabsf(logf(rw)) + fabsf(logf(rh));
                if (cost < best) { best = cost; best_i = (int)i; best_a = (int)a; }
            }
        if (best_i < 0) continue; /* no anchor can express this box: the oracle skips it */
        const emu_tensor *t = &l->outputs[best_i];
        float s = (float)o->strides[best_i];
        uint64_t gx = (uint64_t)floorf(cx / s), gy = (uint64_t)floorf(cy / s);
        if (gx >= t->desc.w || gy >= t->desc.h) continue;
        uint32_t base = (uint32_t)best_a * per;
        float sx = (cx / s - (float)gx + 0.5f) / 2.0f, sy = (cy / s - (float)gy + 0.5f) / 2.0f;
        float sw = sqrtf(bw / o->anchors[best_i][best_a][0]) / 2.0f;
        float sh = sqrtf(bh / o->anchors[best_i][best_a][1]) / 2.0f;
        emu_write(t, out[best_i], 0, base + 0, gy, gx, logit(sx));
        emu_write(t, out[best_i], 0, base + 1, gy, gx, logit(sy));
        emu_write(t, out[best_i], 0, base + 2, gy, gx, logit(sw));
        emu_write(t, out[best_i], 0, base + 3, gy, gx, logit(sh));
        emu_write(t, out[best_i], 0, base + 4, gy, gx, o->logit_pos);
        emu_write(t, out[best_i], 0, base + 5 + (uint32_t)b[j].cls, gy, gx, o->logit_pos);
    }
}

/* "final" table: element (r, k) lives at flat index r*K + k over the output's (c, h, w) in row-major order. */
static void write_final(const emu_loadable *l, uint8_t *const *out, const box_t *b, int nb) {
    const emu_tensor *t = &l->outputs[0];
    uint64_t K = 5 + l->oracle.num_classes, C = t->desc.c, H = t->desc.h, W = t->desc.w;
    uint64_t rows = (C * H * W) / K;
    memset(out[0], 0, t->desc.size);
    for (int j = 0; j < nb && (uint64_t)j < rows; j++) {
        float v[5 + 64] = {0};
        v[0] = 0.5f * (b[j].x0 + b[j].x1); v[1] = 0.5f * (b[j].y0 + b[j].y1);
        v[2] = b[j].x1 - b[j].x0; v[3] = b[j].y1 - b[j].y0; v[4] = 1.0f; v[5 + b[j].cls] = 1.0f;
        for (uint64_t k = 0; k < K; k++) {
            uint64_t f = (uint64_t)j * K + k;
            emu_write(t, out[0], 0, f / (H * W), (f / W) % H, f % W, v[k]);
        }
    }
}

void emu_run_program(const emu_loadable *l, uint8_t *const *inputs, uint8_t *const *outputs) {
    if (l->program == EMU_PROGRAM_ECHO) { echo(l, inputs, outputs); return; }
    box_t boxes[MAX_BOXES];
    int nb = find_boxes(l, inputs[0], boxes);
    if (l->oracle.out_kind == EMU_OUT_RAW) write_raw(l, outputs, boxes, nb);
    else write_final(l, outputs, boxes, nb);
}
