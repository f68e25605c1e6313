/* DLA EMULATOR (test infrastructure): program "network" -- the host process runs the network.
 *
 * A process that wants to run network loadables registers one callback (emulator/network_host.py does it
 * through ctypes, running ONNX Runtime). The emulator calls it from the task's host function, i.e. on the
 * CUDA driver's callback thread, in stream order between the input and output copies, with the loadable
 * bytes and the task's host copies of the tensors in their declared DLA layouts. */
#include <pthread.h>

#include "emu_state.h"

static pthread_mutex_t g_net_lock = PTHREAD_MUTEX_INITIALIZER;
static dlaEmuNetworkFn g_net_fn;
static void *g_net_user;
static uint64_t g_net_failures;

void dlaEmuSetNetworkCallback(dlaEmuNetworkFn fn, void *user) {
    pthread_mutex_lock(&g_net_lock);
    g_net_fn = fn;
    g_net_user = user;
    pthread_mutex_unlock(&g_net_lock);
}

uint64_t dlaEmuNetworkFailures(void) { return g_net_failures; }

int emu_network_ready(void) {
    pthread_mutex_lock(&g_net_lock);
    int ok = g_net_fn != NULL;
    pthread_mutex_unlock(&g_net_lock);
    return ok;
}

/* 0 on success. Tasks run one at a time per module (stream order), so the scratch buffers are not shared. */
int emu_run_network(struct cudlaModule_t *m) {
    pthread_mutex_lock(&g_net_lock);
    dlaEmuNetworkFn fn = g_net_fn;
    void *user = g_net_user;
    pthread_mutex_unlock(&g_net_lock);
    int rc = fn ? fn(user, m->blob, m->blob_size, m->in_scratch, m->out_scratch) : -1;
    if (rc != 0) {
        pthread_mutex_lock(&g_net_lock);
        g_net_failures++;
        pthread_mutex_unlock(&g_net_lock);
        trace("network: host callback %s (rc %d)", fn ? "failed" : "not registered", rc);
    }
    return rc;
}
