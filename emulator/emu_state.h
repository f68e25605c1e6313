/* DLA EMULATOR (test infrastructure): state shared by emu_core.c and emu_api.c. */
#ifndef EMU_STATE_H
#define EMU_STATE_H

#include <cuda.h>
#include <pthread.h>
#include <sys/types.h>

#include "emu_internal.h"

#define DEV_MAGIC 0x444c4144u /* "DLAD" */
#define MOD_MAGIC 0x444c414du /* "DLAM" */
#define MAX_HANDLES_PER_DLA 16

struct cudlaDevHandle_t {
    uint32_t magic;
    uint64_t core;
    CUcontext ctx;
    struct cudlaModule_t *module;
    uint32_t timeout_ms;
    cudlaStatus last_error;
    struct cudlaDevHandle_t *next;
};

struct cudlaModule_t {
    uint32_t magic;
    struct cudlaDevHandle_t *dev;
    emu_loadable l;
    uint8_t *in_scratch[EMU_MAX_TENSORS], *out_scratch[EMU_MAX_TENSORS]; /* pinned (cuMemAllocHost) */
    int pending;                                                          /* tasks enqueued, not finished */
    uint8_t *blob;                                                        /* copy of the loadable (network) */
    int ran;                                                              /* tasks whose program ran */
    size_t blob_size;
};

typedef struct reg {
    struct cudlaDevHandle_t *dev;
    CUdeviceptr ptr;
    size_t size;
    uint64_t *handle; /* the "registered pointer": an emulator token, NOT usable as a CUDA pointer */
    struct reg *next;
} reg_t;

typedef struct {
    struct cudlaModule_t *mod;
    int fault;
    cudlaStatus fault_status;
    uint64_t end_ns; /* when the task's time on its core is over (0: no hold; see emu_timing.c) */
    pid_t submit_tid; /* the thread that submitted it: run_task on another thread is the driver's */
} job_t;

typedef struct {
    int tried, ok;
    CUresult (*init)(unsigned);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*stream_get_ctx)(CUstream, CUcontext *);
    CUresult (*mem_get_address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*mem_alloc_host)(void **, size_t);
    CUresult (*mem_free_host)(void *);
    CUresult (*memcpy_dtoh)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*memcpy_htod)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*launch_host_func)(CUstream, CUhostFn, void *);
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
    CUmodule fault_module;
    CUfunction fault_kernel;
} emu_driver;

extern emu_driver d;
extern pthread_mutex_t g_lock;
extern struct cudlaDevHandle_t *g_devs;
extern reg_t *g_regs;
extern int g_modules;
extern uint64_t g_register_calls, g_submit_calls, g_tasks_submitted, g_tasks_run;
extern char g_violation[512];

int load_driver(void);
void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
cudlaStatus violation(cudlaStatus st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudlaStatus env_status(const char *var, cudlaStatus dflt);
uint64_t env_u64(const char *var, uint64_t dflt);
struct cudlaDevHandle_t *find_dev(const cudlaDevHandle h);
struct cudlaModule_t *valid_mod(const cudlaModule m);
reg_t *find_reg(const struct cudlaDevHandle_t *dev, const uint64_t *handle);
int dev_reg_count(const struct cudlaDevHandle_t *dev);
int emu_network_ready(void);
uint64_t emu_task_hold_ns(void);
uint64_t emu_claim_core(uint64_t core, uint64_t hold_ns);
void emu_hold_until(uint64_t end_ns);
int emu_reuse_outputs(void);
uint64_t emu_thread_cpu_ns(void);
void emu_add_host_cpu(uint64_t ns, int on_submitting_thread);
int emu_run_network(struct cudlaModule_t *m);

#endif
