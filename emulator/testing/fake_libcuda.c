/*
 * TEST-ONLY fake of the few CUDA driver calls the DLA emulator uses, so the emulator, the real
 * cuda.bindings.cudla binding and the backend can run end to end on a machine WITHOUT a GPU (CPU CI).
 * "Device memory" is host memory from fakeMalloc; every async call runs synchronously, so this fake
 * cannot reveal missing stream synchronisation -- the GPU tests do that.
 * Host functions run inline on the caller's thread, or (fakeHostFuncThread(1)) on one thread of the fake's
 * own, as the real driver runs them, with the call waiting for each: still synchronous.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXA 4096
static struct { uintptr_t base; size_t size; } g_alloc[MAXA];
static int g_capturing, g_sticky;
static int g_ctx_token, g_stream_token;
static int g_live_host; /* cuMemAllocHost blocks not yet freed */

/* the host-function thread: one job at a time, the caller waits for it */
static int g_host_thread_on, g_host_thread_started, g_host_busy;
static CUhostFn g_host_fn;
static void *g_host_arg;
static pthread_mutex_t g_host_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_host_cond = PTHREAD_COND_INITIALIZER;

static void *host_thread(void *unused) {
    (void)unused;
    pthread_mutex_lock(&g_host_lock);
    for (;;) {
        while (!g_host_busy) pthread_cond_wait(&g_host_cond, &g_host_lock);
        pthread_mutex_unlock(&g_host_lock);
        g_host_fn(g_host_arg);
        pthread_mutex_lock(&g_host_lock);
        g_host_busy = 0;
        pthread_cond_broadcast(&g_host_cond);
    }
    return NULL;
}

__attribute__((visibility("default"))) void *fakeMalloc(size_t size) {
    void *p = aligned_alloc(256, (size + 255) / 256 * 256);
    for (int i = 0; p && i < MAXA; i++)
        if (!g_alloc[i].base) { g_alloc[i].base = (uintptr_t)p; g_alloc[i].size = size; return p; }
    free(p);
    return NULL;
}
__attribute__((visibility("default"))) int fakeFree(void *p) {
    for (int i = 0; i < MAXA; i++)
        if (g_alloc[i].base == (uintptr_t)p) { g_alloc[i].base = 0; free(p); return 0; }
    return 1;
}
__attribute__((visibility("default"))) void fakeHostFuncThread(int on) { g_host_thread_on = on; }
__attribute__((visibility("default"))) int fakeLiveHostAllocs(void) { return g_live_host; }
__attribute__((visibility("default"))) void fakeSetCapturing(int on) { g_capturing = on; }
__attribute__((visibility("default"))) int fakeStickyError(void) { return g_sticky; }
__attribute__((visibility("default"))) void *fakeStream(void) { return &g_stream_token; }

#define API __attribute__((visibility("default")))
API CUresult cuInit(unsigned f) { (void)f; return CUDA_SUCCESS; }
API CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)&g_ctx_token; return CUDA_SUCCESS; }
API CUresult cuCtxPushCurrent_v2(CUcontext c) { (void)c; return CUDA_SUCCESS; }
API CUresult cuCtxPopCurrent_v2(CUcontext *c) { if (c) *c = (CUcontext)&g_ctx_token; return CUDA_SUCCESS; }
API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) {
    (void)s; *st = g_capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
API CUresult cuStreamGetCtx(CUstream s, CUcontext *c) { (void)s; *c = (CUcontext)&g_ctx_token; return CUDA_SUCCESS; }
API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    for (int i = 0; i < MAXA; i++)
        if (g_alloc[i].base && p >= g_alloc[i].base && p < g_alloc[i].base + g_alloc[i].size) {
            *base = g_alloc[i].base; *size = g_alloc[i].size; return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}
API CUresult cuMemAllocHost_v2(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    if (!*p) return CUDA_ERROR_OUT_OF_MEMORY;
    g_live_host++;
    return CUDA_SUCCESS;
}
API CUresult cuMemFreeHost(void *p) { if (p) g_live_host--; free(p); return CUDA_SUCCESS; }
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    (void)s; if (g_sticky) return CUDA_ERROR_LAUNCH_FAILED; memcpy(dst, (void *)src, n); return CUDA_SUCCESS;
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    (void)s; if (g_sticky) return CUDA_ERROR_LAUNCH_FAILED; memcpy((void *)dst, src, n); return CUDA_SUCCESS;
}
API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg) {
    (void)s;
    if (!g_host_thread_on) { fn(arg); return CUDA_SUCCESS; }
    pthread_mutex_lock(&g_host_lock);
    if (!g_host_thread_started) {
        pthread_t t;
        if (pthread_create(&t, NULL, host_thread, NULL) != 0) { pthread_mutex_unlock(&g_host_lock); return CUDA_ERROR_OUT_OF_MEMORY; }
        pthread_detach(t);
        g_host_thread_started = 1;
    }
    while (g_host_busy) pthread_cond_wait(&g_host_cond, &g_host_lock);
    g_host_fn = fn; g_host_arg = arg; g_host_busy = 1;
    pthread_cond_broadcast(&g_host_cond);
    while (g_host_busy) pthread_cond_wait(&g_host_cond, &g_host_lock);
    pthread_mutex_unlock(&g_host_lock);
    return CUDA_SUCCESS;
}
API CUresult cuModuleLoadData(CUmodule *m, const void *img) { (void)img; *m = (CUmodule)&g_ctx_token; return CUDA_SUCCESS; }
API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *n) {
    (void)m; (void)n; *f = (CUfunction)&g_ctx_token; return CUDA_SUCCESS;
}
API CUresult cuLaunchKernel(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                            unsigned sh, CUstream s, void **p, void **x) {
    (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)sh; (void)s; (void)p; (void)x;
    g_sticky = 1; /* the emulator's fault kernel traps: the "context" is now broken */
    return CUDA_SUCCESS;
}
