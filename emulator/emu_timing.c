/*
 * DLA EMULATOR (test infrastructure): how long a task holds its DLA core.
 *
 * DLA_EMU_TASK_MS=<ms> (a decimal, e.g. 3.82, read at each submit): every task occupies its core for that
 * long. A core runs one task at a time: a task starts when it is submitted or when the core's previous task
 * ends, whichever is later. The task's host function, after the program, sleeps until that end (an absolute
 * CLOCK_MONOTONIC time: where the driver runs the host functions of several streams on one thread, tasks of
 * two cores still end on time), so the stream goes on to the output copies only then. Cores are
 * independent. The timelines belong to the process unless DLA_EMU_CORE_FILE=<path> names a file that
 * several processes share (as every process of one Orin shares its two cores): it holds each core's end
 * time, updated under flock.
 *
 * DLA_EMU_REUSE_OUTPUTS=1: a "network" module runs its program for its first task only; later tasks keep
 * that task's outputs (timing runs whose frames are all alike, where the host's ONNX Runtime would otherwise
 * be what is measured).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "emu_state.h"

#define MAX_CORES 16

static uint64_t g_core_end[MAX_CORES];  /* per-process timelines (ns, CLOCK_MONOTONIC) */
static uint64_t g_core_tasks[MAX_CORES];
static uint64_t g_host_cpu_ns;          /* thread CPU time the task programs took on the host */
static uint64_t g_inline_cpu_ns;        /* ... of it on the submitting thread (host functions run inline) */
static int g_file_fd = -1;
static char g_file_path[512];
static uint64_t *g_file_end;            /* MAX_CORES end times in the shared file's mapping */

static uint64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t emu_task_hold_ns(void) {
    const char *v = getenv("DLA_EMU_TASK_MS");
    if (!v || !*v) return 0;
    double ms = strtod(v, NULL);
    return ms > 0 ? (uint64_t)(ms * 1e6) : 0;
}

/* The shared file's mapping, (re)opened when DLA_EMU_CORE_FILE names another file; NULL when unset or
 * unusable (the per-process timelines are used then, and the trace says why). Called under g_lock. */
static uint64_t *shared_ends(void) {
    const char *path = getenv("DLA_EMU_CORE_FILE");
    if (!path || !*path) return NULL;
    if (g_file_end && strcmp(path, g_file_path) == 0) return g_file_end;
    if (g_file_end) { munmap(g_file_end, MAX_CORES * sizeof(uint64_t)); g_file_end = NULL; }
    if (g_file_fd >= 0) { close(g_file_fd); g_file_fd = -1; }
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) { trace("DLA_EMU_CORE_FILE %s: open failed (errno %d)", path, errno); return NULL; }
    off_t want = (off_t)(MAX_CORES * sizeof(uint64_t));
    if (lseek(fd, 0, SEEK_END) < want && ftruncate(fd, want) != 0) {
        trace("DLA_EMU_CORE_FILE %s: ftruncate failed (errno %d)", path, errno);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { trace("DLA_EMU_CORE_FILE %s: mmap failed (errno %d)", path, errno); close(fd); return NULL; }
    g_file_fd = fd;
    g_file_end = map;
    snprintf(g_file_path, sizeof(g_file_path), "%s", path);
    return g_file_end;
}

/* When a task submitted now on `core` ends (0: no hold configured). Called under g_lock. */
uint64_t emu_claim_core(uint64_t core, uint64_t hold_ns) {
    if (!hold_ns) return 0;
    uint32_t c = (uint32_t)(core % MAX_CORES);
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    uint64_t *ends = shared_ends();
    if (ends) flock(g_file_fd, LOCK_EX);
    uint64_t *end = ends ? &ends[c] : &g_core_end[c];
    uint64_t start = *end > now ? *end : now;
    *end = start + hold_ns;
    uint64_t done = *end;
    if (ends) flock(g_file_fd, LOCK_UN);
    g_core_tasks[c]++;
    return done;
}

/* In the task's host function, after the program: wait for the task's end on its core. */
void emu_hold_until(uint64_t end_ns) {
    if (!end_ns) return;
    struct timespec ts = {(time_t)(end_ns / 1000000000ull), (long)(end_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
}

int emu_reuse_outputs(void) {
    const char *v = getenv("DLA_EMU_REUSE_OUTPUTS");
    return v && *v && strcmp(v, "0") != 0;
}

uint64_t emu_thread_cpu_ns(void) { return now_ns(CLOCK_THREAD_CPUTIME_ID); }

void emu_add_host_cpu(uint64_t ns, int on_submitting_thread) {
    pthread_mutex_lock(&g_lock);
    g_host_cpu_ns += ns;
    if (on_submitting_thread) g_inline_cpu_ns += ns;
    pthread_mutex_unlock(&g_lock);
}

uint64_t dlaEmuHostCpuNs(void) {
    pthread_mutex_lock(&g_lock);
    uint64_t v = g_host_cpu_ns;
    pthread_mutex_unlock(&g_lock);
    return v;
}

const char *dlaEmuHostThreadName(void) { return DLA_EMU_HOST_THREAD; }

uint64_t dlaEmuInlineHostCpuNs(void) {
    pthread_mutex_lock(&g_lock);
    uint64_t v = g_inline_cpu_ns;
    pthread_mutex_unlock(&g_lock);
    return v;
}

uint64_t dlaEmuCoreTasks(uint64_t core) {
    pthread_mutex_lock(&g_lock);
    uint64_t v = g_core_tasks[core % MAX_CORES];
    pthread_mutex_unlock(&g_lock);
    return v;
}
