/* DLA EMULATOR (test infrastructure): internal types shared by the emulator's C files. */
#ifndef EMU_INTERNAL_H
#define EMU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cudla_emu.h"

/* ---- emulated loadable file format (written by emulator/make_loadable.py; all little-endian) ----
 * header (32 bytes): magic[8] = "DLAEMU1\0", u32 version, u32 program, u32 num_inputs, u32 num_outputs,
 *                    u32 params_size, u32 reserved
 * then (num_inputs + num_outputs) tensor records of EMU_RECORD_SIZE bytes (inputs first), then params.
 */
#define EMU_MAGIC "DLAEMU1"
#define EMU_VERSION 1u
#define EMU_HEADER_SIZE 32u
#define EMU_RECORD_SIZE 192u
#define EMU_MAX_TENSORS 16u

enum { EMU_PROGRAM_ECHO = 0, EMU_PROGRAM_ORACLE = 1, EMU_PROGRAM_NETWORK = 2 };
/* network params: u32 precision (0 fp16, 1 int8), u8 onnx_sha256[32], u64 onnx_size, onnx bytes */
#define EMU_NETWORK_PARAMS_HEAD 44u
enum { EMU_FMT_LINEAR = 0, EMU_FMT_HWC4 = 1, EMU_FMT_CHW16 = 2, EMU_FMT_CHW32 = 3 };
enum { EMU_DT_FP16 = 0, EMU_DT_INT8 = 1 };
enum { EMU_OUT_RAW = 0, EMU_OUT_FINAL = 1 };

typedef struct {
    cudlaModuleTensorDescriptor desc; /* what cudlaModuleGetAttributes reports */
    uint8_t fmt;                      /* EMU_FMT_* : how the programs address elements */
    uint8_t dtype;                    /* EMU_DT_* */
    float scale;                      /* int8 calibration scale (ignored for fp16) */
} emu_tensor;

typedef struct {
    uint32_t out_kind, num_classes, num_anchors, bgr, tolerance, min_size;
    float mean[3], std[3];
    float logit_pos, logit_neg;
    uint8_t colours[64][4];
    uint32_t strides[EMU_MAX_TENSORS];
    float anchors[EMU_MAX_TENSORS][16][2];
} emu_oracle_params;

typedef struct {
    uint32_t program;
    uint32_t num_inputs, num_outputs;
    emu_tensor inputs[EMU_MAX_TENSORS];
    emu_tensor outputs[EMU_MAX_TENSORS];
    emu_oracle_params oracle;
} emu_loadable;

/* Parse a blob; returns cudlaSuccess or the status a real driver would give a bad file (Umd / version). */
cudlaStatus emu_parse_loadable(const uint8_t *blob, size_t size, emu_loadable *out, char *why, size_t why_len);

/* Element access through a tensor's declared layout (n, c, h, w in logical coordinates). */
float emu_read(const emu_tensor *t, const uint8_t *buf, uint64_t n, uint64_t c, uint64_t h, uint64_t w);
void emu_write(const emu_tensor *t, uint8_t *buf, uint64_t n, uint64_t c, uint64_t h, uint64_t w, float v);

/* Run the loadable's program: inputs[i] / outputs[i] are host copies of the tensors (desc.size bytes). */
void emu_run_program(const emu_loadable *l, uint8_t *const *inputs, uint8_t *const *outputs);

#endif
