/* DLA EMULATOR (test infrastructure): emulated-loadable parsing and element access through the four
 * DLA layouts (kDLA_LINEAR, kDLA_HWC4, kCHW16, kCHW32) in fp16 or int8. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emu_internal.h"

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static float rdf(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }

/* IEEE half <-> float, round to nearest even (what numpy's float16 cast does). */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) { bits = sign; }
        else { float f = ldexpf((float)man, -24); return sign ? -f : f; }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f; memcpy(&f, &bits, 4); return f;
}

static uint16_t float_to_half(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return sign | (absx > 0x7f800000u ? 0x7e00 : 0x7c00);
    if (absx >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) {                      /* subnormal half (or zero) */
        float a; memcpy(&a, &absx, 4);
        float q = a * 16777216.0f;                 /* units of 2^-24 */
        return sign | (uint16_t)lrintf(q);         /* lrintf: current mode = nearest even */
    }
    uint32_t mant = absx & 0x7fffffu, exp = (absx >> 23) - 112;
    uint32_t half = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1; /* may carry into exponent: ok */
    return sign | (uint16_t)half;
}

static size_t offset_of(const emu_tensor *t, uint64_t n, uint64_t c, uint64_t h, uint64_t w) {
    const uint32_t *s = t->desc.stride;
    size_t e = t->dtype == EMU_DT_FP16 ? 2 : 1;
    switch (t->fmt) {
    case EMU_FMT_LINEAR: return n * s[3] + c * s[2] + h * s[1] + w * s[0];
    case EMU_FMT_HWC4: return n * s[3] + h * s[1] + w * s[0] + c * e;
    case EMU_FMT_CHW16: return n * s[3] + (c / 16) * s[2] + h * s[1] + w * s[0] + (c % 16) * e;
    default: return n * s[3] + (c / 32) * s[2] + h * s[1] + w * s[0] + (c % 32) * e;
    }
}

float emu_read(const emu_tensor *t, const uint8_t *buf, uint64_t n, uint64_t c, uint64_t h, uint64_t w) {
    const uint8_t *p = buf + offset_of(t, n, c, h, w);
    if (t->dtype == EMU_DT_FP16) { uint16_t v; memcpy(&v, p, 2); return half_to_float(v); }
    return (float)(int8_t)p[0] * t->scale;
}

void emu_write(const emu_tensor *t, uint8_t *buf, uint64_t n, uint64_t c, uint64_t h, uint64_t w, float v) {
    uint8_t *p = buf + offset_of(t, n, c, h, w);
    if (t->dtype == EMU_DT_FP16) { uint16_t q = float_to_half(v); memcpy(p, &q, 2); return; }
    float q = rintf(v / t->scale);
    if (q > 127.0f) q = 127.0f;
    if (q < -128.0f) q = -128.0f;
    p[0] = (uint8_t)(int8_t)q;
}

/* A record's layout must be self-consistent, or the programs would read outside the buffer. */
static int check_tensor(const emu_tensor *t, char *why, size_t why_len) {
    const cudlaModuleTensorDescriptor *d = &t->desc;
    size_t e = t->dtype == EMU_DT_FP16 ? 2 : 1;
    if (t->fmt > EMU_FMT_CHW32 || t->dtype > EMU_DT_INT8 || d->n == 0 || d->c == 0 || d->h == 0 || d->w == 0) {
        snprintf(why, why_len, "tensor '%s': bad format/type/dims", d->name);
        return 0;
    }
    if ((t->fmt == EMU_FMT_CHW16 && t->dtype != EMU_DT_FP16) || (t->fmt == EMU_FMT_CHW32 && t->dtype != EMU_DT_INT8)
        || (t->fmt == EMU_FMT_HWC4 && d->c != 1 && d->c != 3 && d->c != 4)) {
        snprintf(why, why_len, "tensor '%s': format/type/channel combination not allowed", d->name);
        return 0;
    }
    if (t->dtype == EMU_DT_INT8 && !(t->scale > 0.0f)) {
        snprintf(why, why_len, "tensor '%s': int8 without a positive scale", d->name);
        return 0;
    }
    size_t last = offset_of(t, d->n - 1, d->c - 1, d->h - 1, d->w - 1) + e;
    if (last > d->size) {
        snprintf(why, why_len, "tensor '%s': strides need %zu bytes > size %llu", d->name, last,
                 (unsigned long long)d->size);
        return 0;
    }
    return 1;
}

static void parse_record(const uint8_t *r, emu_tensor *t) {
    memset(t, 0, sizeof(*t));
    memcpy(t->desc.name, r, CUDLA_RADIX_NAME_LEN - 1);
    t->desc.name[CUDLA_RADIX_NAME_LEN - 1] = '\0';
    t->desc.size = rd64(r + 96);
    t->desc.n = rd64(r + 104);
    t->desc.c = rd64(r + 112);
    t->desc.h = rd64(r + 120);
    t->desc.w = rd64(r + 128);
    t->desc.dataFormat = r[136];
    t->desc.dataType = r[137];
    t->desc.dataCategory = r[138];
    t->desc.pixelFormat = r[139];
    t->desc.pixelMapping = r[140];
    t->fmt = r[141];
    t->dtype = r[142];
    for (int i = 0; i < 8; i++) t->desc.stride[i] = rd32(r + 144 + 4 * i);
    t->scale = rdf(r + 176);
}

cudlaStatus emu_parse_loadable(const uint8_t *blob, size_t size, emu_loadable *out, char *why, size_t why_len) {
    memset(out, 0, sizeof(*out));
    if (size < EMU_HEADER_SIZE || memcmp(blob, EMU_MAGIC, 8) != 0) {
        snprintf(why, why_len, "not an emulated loadable (bad magic): a TensorRT engine is not a DLA loadable");
        return cudlaErrorUmd;
    }
    if (rd32(blob + 8) != EMU_VERSION) {
        snprintf(why, why_len, "emulated loadable version %u, emulator supports %u", rd32(blob + 8), EMU_VERSION);
        return cudlaErrorIncompatibleDlaSWVersion;
    }
    out->program = rd32(blob + 12);
    out->num_inputs = rd32(blob + 16);
    out->num_outputs = rd32(blob + 20);
    uint32_t params_size = rd32(blob + 24);
    if (out->program > EMU_PROGRAM_NETWORK || out->num_inputs == 0 || out->num_outputs == 0
        || out->num_inputs > EMU_MAX_TENSORS || out->num_outputs > EMU_MAX_TENSORS) {
        snprintf(why, why_len, "bad program or tensor counts");
        return cudlaErrorUmd;
    }
    size_t need = EMU_HEADER_SIZE + (size_t)EMU_RECORD_SIZE * (out->num_inputs + out->num_outputs) + params_size;
    if (size != need) {
        snprintf(why, why_len, "size %zu != %zu the header declares (truncated or padded file)", size, need);
        return cudlaErrorUmd;
    }
    const uint8_t *r = blob + EMU_HEADER_SIZE;
    for (uint32_t i = 0; i < out->num_inputs; i++, r += EMU_RECORD_SIZE) parse_record(r, &out->inputs[i]);
    for (uint32_t i = 0; i < out->num_outputs; i++, r += EMU_RECORD_SIZE) parse_record(r, &out->outputs[i]);
    for (uint32_t i = 0; i < out->num_inputs; i++)
        if (!check_tensor(&out->inputs[i], why, why_len)) return cudlaErrorUmd;
    for (uint32_t i = 0; i < out->num_outputs; i++) {
        if (!check_tensor(&out->outputs[i], why, why_len)) return cudlaErrorUmd;
        if (out->outputs[i].fmt == EMU_FMT_HWC4) {
            snprintf(why, why_len, "kDLA_HWC4 is an input-only format");
            return cudlaErrorUmd;
        }
    }
    if (out->program == EMU_PROGRAM_ORACLE) {
        emu_oracle_params *o = &out->oracle;
        const uint8_t *p = r;
        if (params_size < 48) { snprintf(why, why_len, "oracle params truncated"); return cudlaErrorUmd; }
        o->out_kind = rd32(p); o->num_classes = rd32(p + 4); o->num_anchors = rd32(p + 8);
        o->bgr = rd32(p + 12); o->tolerance = rd32(p + 16); o->min_size = rd32(p + 20);
        for (int i = 0; i < 3; i++) { o->mean[i] = rdf(p + 24 + 4 * i); o->std[i] = rdf(p + 36 + 4 * i); }
        o->logit_pos = rdf(p + 48); o->logit_neg = rdf(p + 52);
        p += 56;
        if (o->num_classes == 0 || o->num_classes > 64 || o->num_anchors > 16) {
            snprintf(why, why_len, "oracle: bad class/anchor counts"); return cudlaErrorUmd;
        }
        size_t want = 56 + 4 * o->num_classes;
        if (o->out_kind == EMU_OUT_RAW) want += 4 * out->num_outputs + 8 * o->num_anchors * out->num_outputs;
        if (params_size != want) { snprintf(why, why_len, "oracle params size %u != %zu", params_size, want);
                                   return cudlaErrorUmd; }
        for (uint32_t k = 0; k < o->num_classes; k++, p += 4) memcpy(o->colours[k], p, 4);
        if (o->out_kind == EMU_OUT_RAW) {
            for (uint32_t i = 0; i < out->num_outputs; i++, p += 4) o->strides[i] = rd32(p);
            for (uint32_t i = 0; i < out->num_outputs; i++)
                for (uint32_t a = 0; a < o->num_anchors; a++, p += 8) {
                    o->anchors[i][a][0] = rdf(p); o->anchors[i][a][1] = rdf(p + 4);
                }
            for (uint32_t i = 0; i < out->num_outputs; i++)
                if (out->outputs[i].desc.c < o->num_anchors * (5 + o->num_classes) || o->strides[i] == 0) {
                    snprintf(why, why_len, "oracle: output %u has too few channels or stride 0", i);
                    return cudlaErrorUmd;
                }
        }
        if (out->inputs[0].desc.c != 3) { snprintf(why, why_len, "oracle needs a 3-channel input");
                                          return cudlaErrorUmd; }
    } else if (out->program == EMU_PROGRAM_NETWORK) {
        uint64_t onnx_size = params_size >= EMU_NETWORK_PARAMS_HEAD ? rd64(r + 36) : 0;
        if (params_size < EMU_NETWORK_PARAMS_HEAD || rd32(r) > 1 || onnx_size == 0
            || onnx_size != params_size - EMU_NETWORK_PARAMS_HEAD) {
            snprintf(why, why_len, "network params: bad precision or ONNX size"); return cudlaErrorUmd;
        }
    } else if (params_size != 0) {
        snprintf(why, why_len, "echo takes no params"); return cudlaErrorUmd;
    }
    return cudlaSuccess;
}
