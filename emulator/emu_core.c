/*
 * DLA EMULATOR (test infrastructure) -- a stand-in libcudla.so.1 for machines without a DLA.
 *
 * Implements the cuDLA calls that cuda.bindings.cudla resolves, in HYBRID mode only, and enforces the
 * hybrid-mode contract (see emulator/README.md for the list and the status codes). Work is stream-ordered
 * on the caller's CUDA stream: per task, the input tensors are copied device->host into emulator scratch,
 * a host function (cuLaunchHostFunc) runs the loadable's program, and the outputs are copied back
 * host->device -- so a backend that reads outputs before synchronising sees stale data.
 * The CUDA driver (libcuda.so.1) is opened with dlopen: no link-time CUDA dependency.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_state.h"

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
struct cudlaDevHandle_t *g_devs;
reg_t *g_regs;
int g_modules;
uint64_t g_register_calls, g_submit_calls, g_tasks_submitted, g_tasks_run;
char g_violation[512];

/* ---- CUDA driver entry points, resolved at first use --------------------------------------------- */
emu_driver d;

int load_driver(void) {
    if (d.tried) return d.ok;
    d.tried = 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return 0;
#define SYM(field, name) if (!(*(void **)&d.field = dlsym(h, name))) return 0
    SYM(init, "cuInit");
    SYM(ctx_get_current, "cuCtxGetCurrent");
    SYM(ctx_push, "cuCtxPushCurrent_v2");
    SYM(ctx_pop, "cuCtxPopCurrent_v2");
    SYM(stream_is_capturing, "cuStreamIsCapturing");
    SYM(stream_get_ctx, "cuStreamGetCtx");
    SYM(mem_get_address_range, "cuMemGetAddressRange_v2");
    SYM(mem_alloc_host, "cuMemAllocHost_v2");
    SYM(mem_free_host, "cuMemFreeHost");
    SYM(memcpy_dtoh, "cuMemcpyDtoHAsync_v2");
    SYM(memcpy_htod, "cuMemcpyHtoDAsync_v2");
    SYM(launch_host_func, "cuLaunchHostFunc");
    SYM(module_load_data, "cuModuleLoadData");
    SYM(module_get_function, "cuModuleGetFunction");
    SYM(launch_kernel, "cuLaunchKernel");
#undef SYM
    d.ok = d.init(0) == CUDA_SUCCESS;
    return d.ok;
}

/* ---- helpers -------------------------------------------------------------------------------------- */
void trace(const char *fmt, ...) {
    if (!getenv("DLA_EMU_TRACE")) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("[dla-emulator] ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Record why a call was refused (read by tests through dlaEmuLastViolation), return the status. */
cudlaStatus violation(cudlaStatus st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_violation, sizeof(g_violation), fmt, ap);
    va_end(ap);
    trace("refused (status %d): %s", (int)st, g_violation);
    return st;
}

static const struct { const char *name; cudlaStatus st; } k_status_names[] = {
    {"InvalidParam", cudlaErrorInvalidParam}, {"OutOfResources", cudlaErrorOutOfResources},
    {"CreationFailed", cudlaErrorCreationFailed}, {"InvalidAddress", cudlaErrorInvalidAddress},
    {"Os", cudlaErrorOs}, {"Cuda", cudlaErrorCuda}, {"Umd", cudlaErrorUmd},
    {"InvalidDevice", cudlaErrorInvalidDevice}, {"InvalidAttribute", cudlaErrorInvalidAttribute},
    {"IncompatibleDlaSWVersion", cudlaErrorIncompatibleDlaSWVersion},
    {"MemoryRegistered", cudlaErrorMemoryRegistered}, {"InvalidModule", cudlaErrorInvalidModule},
    {"UnsupportedOperation", cudlaErrorUnsupportedOperation}, {"NvSci", cudlaErrorNvSci},
    {"DriverNotFound", cudlaErrorDriverNotFound}, {"DlaErrInvalidInput", cudlaErrorDlaErrInvalidInput},
    {"DlaErrInvalidPreAction", cudlaErrorDlaErrInvalidPreAction}, {"DlaErrNoMem", cudlaErrorDlaErrNoMem},
    {"DlaErrProcessorBusy", cudlaErrorDlaErrProcessorBusy},
    {"DlaErrTaskStatusMismatch", cudlaErrorDlaErrTaskStatusMismatch},
    {"DlaErrEngineTimeout", cudlaErrorDlaErrEngineTimeout}, {"DlaErrDataMismatch", cudlaErrorDlaErrDataMismatch},
    {"Unknown", cudlaErrorUnknown},
};

/* Status from an environment variable: a number, "ErrorUmd", "cudlaErrorUmd" or "Umd". */
cudlaStatus env_status(const char *var, cudlaStatus dflt) {
    const char *v = getenv(var);
    if (!v || !*v) return dflt;
    char *end;
    long n = strtol(v, &end, 0);
    if (*end == '\0') return (cudlaStatus)n;
    if (!strncmp(v, "cudla", 5)) v += 5;
    if (!strncmp(v, "Error", 5)) v += 5;
    for (size_t i = 0; i < sizeof(k_status_names) / sizeof(k_status_names[0]); i++)
        if (!strcmp(v, k_status_names[i].name)) return k_status_names[i].st;
    return dflt;
}

uint64_t env_u64(const char *var, uint64_t dflt) {
    const char *v = getenv(var);
    return (v && *v) ? strtoull(v, NULL, 0) : dflt;
}

struct cudlaDevHandle_t *find_dev(const cudlaDevHandle h) {
    for (struct cudlaDevHandle_t *p = g_devs; p; p = p->next)
        if (p == h && p->magic == DEV_MAGIC) return p;
    return NULL;
}

struct cudlaModule_t *valid_mod(const cudlaModule m) {
    for (struct cudlaDevHandle_t *p = g_devs; p; p = p->next)
        if (p->module && p->module == m && m->magic == MOD_MAGIC) return m;
    return NULL;
}

reg_t *find_reg(const struct cudlaDevHandle_t *dev, const uint64_t *handle) {
    for (reg_t *r = g_regs; r; r = r->next)
        if (r->dev == dev && r->handle == handle) return r;
    return NULL;
}

int dev_reg_count(const struct cudlaDevHandle_t *dev) {
    int n = 0;
    for (reg_t *r = g_regs; r; r = r->next) n += r->dev == dev;
    return n;
}

