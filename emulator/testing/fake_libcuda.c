/*
 * TEST-ONLY fake of the few CUDA driver calls the DLA emulator uses, so the emulator, the real
 * cuda.bindings.cudla binding and the backend can run end to end on a machine WITHOUT a GPU (CPU CI).
 * "Device memory" is host memory from fakeMalloc.
 *
 * Streams are asynchronous, as CUDA's are: each stream from fakeStream() has one thread that runs its work
 * (copies, memsets, host functions) in the order it was enqueued, while the caller goes on. So a host that
 * reads a result before waiting for it, or rewrites a buffer a queued copy still reads, sees the wrong
 * bytes here as it would on a GPU; and a DLA task held on its core (DLA_EMU_TASK_MS) holds the stream, not
 * the thread that submitted it. Events are positions in a stream's queue (fakeEventRecord returns one);
 * waiting for one waits until the stream's thread has run everything enqueued before it. Work given a
 * stream that fakeStream did not make (e.g. NULL) runs at once on the caller's thread.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define MAXA 4096
#define MAXS 64
static struct { uintptr_t base; size_t size; } g_alloc[MAXA];
static int g_capturing, g_sticky;
static int g_ctx_token;

typedef struct op {
    struct op *next;
    CUhostFn fn;   /* a host function, or NULL for a copy / memset */
    void *arg;
    void *dst;
    const void *src; /* NULL: memset dst to value */
    size_t n;
    int value;
} op_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    op_t *head, *tail;   /* head is the op running (or next to run) */
    uint64_t queued, done;
    int stop;
    pthread_t thread;
} fstream_t;

static pthread_mutex_t g_streams_mu = PTHREAD_MUTEX_INITIALIZER;
static fstream_t *g_streams[MAXS];

static void run_op(const op_t *op) {
    if (op->fn) op->fn(op->arg);
    else if (op->src) memcpy(op->dst, op->src, op->n);
    else memset(op->dst, op->value, op->n);
}

static void *stream_main(void *p) {
    fstream_t *s = p;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break; /* stopping, and everything enqueued has run */
        op_t *op = s->head;
        pthread_mutex_unlock(&s->mu);
        run_op(op);
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->done++;
        free(op);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static fstream_t *lookup(CUstream handle) {
    fstream_t *found = NULL;
    pthread_mutex_lock(&g_streams_mu);
    for (int i = 0; handle && i < MAXS; i++)
        if (g_streams[i] == (fstream_t *)handle) found = g_streams[i];
    pthread_mutex_unlock(&g_streams_mu);
    return found;
}

/* Queue an op on its stream (a copy of *tmpl), or run it now when the stream is not one of ours. */
static CUresult submit(CUstream handle, const op_t *tmpl) {
    fstream_t *s = lookup(handle);
    if (!s) { run_op(tmpl); return CUDA_SUCCESS; }
    op_t *op = malloc(sizeof *op);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    *op = *tmpl;
    op->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = op; else s->head = op;
    s->tail = op;
    s->queued++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

API void *fakeMalloc(size_t size) {
    void *p = aligned_alloc(256, (size + 255) / 256 * 256);
    for (int i = 0; p && i < MAXA; i++)
        if (!g_alloc[i].base) { g_alloc[i].base = (uintptr_t)p; g_alloc[i].size = size; return p; }
    free(p);
    return NULL;
}
API int fakeFree(void *p) {
    for (int i = 0; i < MAXA; i++)
        if (g_alloc[i].base == (uintptr_t)p) { g_alloc[i].base = 0; free(p); return 0; }
    return 1;
}
API void fakeSetCapturing(int on) { g_capturing = on; }
API int fakeStickyError(void) { return g_sticky; }

API void *fakeStream(void) {
    fstream_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_lock(&g_streams_mu);
    int slot = -1;
    for (int i = 0; i < MAXS && slot < 0; i++)
        if (!g_streams[i]) slot = i;
    if (slot >= 0 && pthread_create(&s->thread, NULL, stream_main, s) == 0) g_streams[slot] = s;
    else slot = -1;
    pthread_mutex_unlock(&g_streams_mu);
    if (slot < 0) { free(s); return NULL; }
    return s;
}
/* A position in the stream's queue: done once everything enqueued so far has run. */
API uint64_t fakeEventRecord(void *handle) {
    fstream_t *s = lookup(handle);
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    uint64_t mark = s->queued;
    pthread_mutex_unlock(&s->mu);
    return mark;
}
API int fakeEventQuery(void *handle, uint64_t mark) {
    fstream_t *s = lookup(handle);
    if (!s) return 1;
    pthread_mutex_lock(&s->mu);
    int done = s->done >= mark;
    pthread_mutex_unlock(&s->mu);
    return done;
}
API void fakeEventSynchronize(void *handle, uint64_t mark) {
    fstream_t *s = lookup(handle);
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    while (s->done < mark) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}
API void fakeStreamSynchronize(void *handle) { fakeEventSynchronize(handle, fakeEventRecord(handle)); }
/* Runs what is queued, then ends the stream's thread. */
API void fakeStreamDestroy(void *handle) {
    fstream_t *s = lookup(handle);
    if (!s) return;
    pthread_mutex_lock(&g_streams_mu);
    for (int i = 0; i < MAXS; i++)
        if (g_streams[i] == s) g_streams[i] = NULL;
    pthread_mutex_unlock(&g_streams_mu);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
API int fakeMemcpyAsync(void *dst, const void *src, size_t n, void *stream) {
    op_t op = {.dst = dst, .src = src, .n = n};
    return submit((CUstream)stream, &op) == CUDA_SUCCESS ? 0 : 1;
}
API int fakeMemsetAsync(void *dst, int value, size_t n, void *stream) {
    op_t op = {.dst = dst, .n = n, .value = value};
    return submit((CUstream)stream, &op) == CUDA_SUCCESS ? 0 : 1;
}

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
static int g_live_host; /* cuMemAllocHost blocks not yet freed (fakeLiveHostAllocs) */
API int fakeLiveHostAllocs(void) { return g_live_host; }
API CUresult cuMemAllocHost_v2(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    if (!*p) return CUDA_ERROR_OUT_OF_MEMORY;
    __atomic_add_fetch(&g_live_host, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}
API CUresult cuMemFreeHost(void *p) {
    if (p) __atomic_sub_fetch(&g_live_host, 1, __ATOMIC_RELAXED);
    free(p);
    return CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    if (g_sticky) return CUDA_ERROR_LAUNCH_FAILED;
    op_t op = {.dst = dst, .src = (const void *)src, .n = n};
    return submit(s, &op);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    if (g_sticky) return CUDA_ERROR_LAUNCH_FAILED;
    op_t op = {.dst = (void *)dst, .src = src, .n = n};
    return submit(s, &op);
}
API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg) {
    op_t op = {.fn = fn, .arg = arg};
    return submit(s, &op);
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
