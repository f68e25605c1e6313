/*
 * DLA EMULATOR (test infrastructure): cudlaSubmitTask in hybrid mode.
 *
 * Checks, in this order (first failure wins): device handle, task array, flags, non-NULL stream, stream not
 * capturing, stream of the device's CUDA context, then per task: module of this handle, NULL events, the
 * module's tensor counts, every pointer a registration of this handle covering its descriptor's size.
 * Then, per task, stream-ordered: D2H copies of the inputs -> host function running the program (and, with
 * DLA_EMU_TASK_MS, holding the task's time on its core: emu_timing.c) -> H2D copies of the outputs -> host
 * function marking the task done.
 *
 * The CUDA driver runs host functions on a thread of its own, which exists in the process only because
 * the emulator stands in for the DLA (cuDLA's hybrid mode on a Jetson needs no host thread per task): the
 * first task it runs names it DLA_EMU_HOST_THREAD, so a CPU account can tell it from the caller's threads
 * (threads it starts, e.g. ONNX Runtime's for the network program, inherit the name). A driver that runs
 * host functions inline on the submitting thread (the CPU fake) keeps that thread's name.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu_state.h"

const char *emu_fault_ptx(void);

static __thread int t_named; /* this host-function thread already carries DLA_EMU_HOST_THREAD */

static void CUDA_CB run_task(void *arg) {
    job_t *job = arg;
    struct cudlaModule_t *m = job->mod;
    int inline_run = gettid() == job->submit_tid;
    if (!inline_run && !t_named) {
        pthread_setname_np(pthread_self(), DLA_EMU_HOST_THREAD);
        t_named = 1;
    }
    uint64_t delay_ms = env_u64("DLA_EMU_DELAY_MS", 0); /* makes a missing stream sync visible */
    if (delay_ms) {
        struct timespec ts = {(time_t)(delay_ms / 1000), (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    uint64_t cpu0 = emu_thread_cpu_ns();
    if (job->fault) {
        /* a faulted DLA task leaves garbage behind; the status is what cudlaGetLastError reports */
        for (uint32_t i = 0; i < m->l.num_outputs; i++) memset(m->out_scratch[i], 0xA5, m->l.outputs[i].desc.size);
        pthread_mutex_lock(&g_lock);
        m->dev->last_error = job->fault_status;
        pthread_mutex_unlock(&g_lock);
    } else if (m->l.program == EMU_PROGRAM_NETWORK) {
        /* with DLA_EMU_REUSE_OUTPUTS the scratch still holds the first task's outputs */
        if (!(m->ran && emu_reuse_outputs()) && emu_run_network(m) != 0) {
            /* the host failed: garbage out, and the DLA status says so */
            for (uint32_t i = 0; i < m->l.num_outputs; i++) memset(m->out_scratch[i], 0xA5, m->l.outputs[i].desc.size);
            pthread_mutex_lock(&g_lock);
            m->dev->last_error = cudlaErrorUmd;
            pthread_mutex_unlock(&g_lock);
        }
    } else {
        emu_run_program(&m->l, m->in_scratch, m->out_scratch);
    }
    emu_add_host_cpu(emu_thread_cpu_ns() - cpu0, inline_run);
    emu_hold_until(job->end_ns);
    pthread_mutex_lock(&g_lock);
    m->ran++;
    g_tasks_run++;
    pthread_mutex_unlock(&g_lock);
}

static void CUDA_CB task_done(void *arg) {
    job_t *job = arg;
    pthread_mutex_lock(&g_lock);
    job->mod->pending--;
    pthread_mutex_unlock(&g_lock);
    free(job);
}

static int launch_fault_kernel(CUstream stream) {
    if (!d.fault_kernel) {
        if (d.module_load_data(&d.fault_module, emu_fault_ptx()) != CUDA_SUCCESS) return 0;
        if (d.module_get_function(&d.fault_kernel, d.fault_module, "dla_emu_fault") != CUDA_SUCCESS) return 0;
    }
    return d.launch_kernel(d.fault_kernel, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL) == CUDA_SUCCESS;
}

static cudlaStatus check_task(struct cudlaDevHandle_t *dev, const cudlaTask *t, uint32_t k) {
    struct cudlaModule_t *m = dev->module;
    if (!m || t->moduleHandle != m)
        return violation(cudlaErrorInvalidModule, "submit: task %u names a module not loaded on this handle", k);
    if (t->waitEvents || t->signalEvents)
        return violation(cudlaErrorInvalidParam, "submit: task %u has wait/signal events; hybrid mode needs NULL", k);
    if (t->numInputTensors != m->l.num_inputs || t->numOutputTensors != m->l.num_outputs)
        return violation(cudlaErrorInvalidParam, "submit: task %u has %u inputs/%u outputs, module has %u/%u", k,
                         t->numInputTensors, t->numOutputTensors, m->l.num_inputs, m->l.num_outputs);
    if (!t->inputTensor || !t->outputTensor)
        return violation(cudlaErrorInvalidParam, "submit: task %u has a NULL tensor array", k);
    for (uint32_t side = 0; side < 2; side++) {
        uint32_t n = side ? m->l.num_outputs : m->l.num_inputs;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t *p = side ? t->outputTensor[i] : t->inputTensor[i];
            const emu_tensor *desc = side ? &m->l.outputs[i] : &m->l.inputs[i];
            reg_t *r = find_reg(dev, p);
            if (!r)
                return violation(cudlaErrorInvalidAddress, "submit: %s tensor %u ('%s') pointer %p is not a "
                                 "registered pointer of this handle", side ? "output" : "input", i,
                                 desc->desc.name, (void *)p);
            if (r->size < desc->desc.size)
                return violation(cudlaErrorInvalidParam, "submit: %s tensor %u ('%s') registered with %zu bytes, "
                                 "descriptor needs %llu", side ? "output" : "input", i, desc->desc.name, r->size,
                                 (unsigned long long)desc->desc.size);
        }
    }
    return cudlaSuccess;
}

/* Enqueue one checked task on the stream. Registration lookups were done under the lock. */
static cudlaStatus enqueue(struct cudlaDevHandle_t *dev, const cudlaTask *t, CUstream stream,
                           CUdeviceptr *in_ptr, CUdeviceptr *out_ptr, job_t *job) {
    struct cudlaModule_t *m = dev->module;
    int fault = job->fault; /* read now: task_done may free the job as soon as it is enqueued */
    for (uint32_t i = 0; i < m->l.num_inputs; i++)
        if (d.memcpy_dtoh(m->in_scratch[i], in_ptr[i], m->l.inputs[i].desc.size, stream) != CUDA_SUCCESS)
            return cudlaErrorCuda;
    if (d.launch_host_func(stream, run_task, job) != CUDA_SUCCESS) return cudlaErrorCuda;
    for (uint32_t i = 0; i < m->l.num_outputs; i++)
        if (d.memcpy_htod(out_ptr[i], m->out_scratch[i], m->l.outputs[i].desc.size, stream) != CUDA_SUCCESS)
            return cudlaErrorCuda;
    if (d.launch_host_func(stream, task_done, job) != CUDA_SUCCESS) return cudlaErrorCuda;
    if (fault && strcmp(getenv("DLA_EMU_FAULT_CUDA") ? getenv("DLA_EMU_FAULT_CUDA") : "trap", "none") != 0)
        if (!launch_fault_kernel(stream)) return cudlaErrorCuda;
    (void)t;
    return cudlaSuccess;
}

cudlaStatus cudlaSubmitTask(const cudlaDevHandle devHandle, const cudlaTask *const ptrToTasks,
                            const uint32_t numTasks, void *const stream, const uint32_t flags) {
    trace("cudlaSubmitTask(%p, tasks=%p, n=%u, stream=%p, flags=%u)", (void *)devHandle, (const void *)ptrToTasks,
          numTasks, stream, flags);
    pthread_mutex_lock(&g_lock);
    uint64_t call = ++g_submit_calls;
    cudlaStatus st = cudlaSuccess;
    struct cudlaDevHandle_t *dev = find_dev(devHandle);
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    CUcontext sctx = NULL;
    if (!dev) st = violation(cudlaErrorInvalidDevice, "submit: unknown device handle");
    else if (!ptrToTasks || numTasks == 0) st = violation(cudlaErrorInvalidParam, "submit: no tasks");
    else if (flags & ~7u) st = violation(cudlaErrorInvalidParam, "submit: unknown flags %u", flags);
    else if (!stream) st = violation(cudlaErrorInvalidParam, "submit: hybrid mode needs a non-NULL CUDA stream");
    else if (d.stream_is_capturing((CUstream)stream, &cap) != CUDA_SUCCESS)
        st = violation(cudlaErrorCuda, "submit: cuStreamIsCapturing failed for stream %p", stream);
    else if (cap != CU_STREAM_CAPTURE_STATUS_NONE)
        st = violation(cudlaErrorUnsupportedOperation, "submit: stream %p is being captured into a CUDA graph",
                       stream);
    else if (d.stream_get_ctx((CUstream)stream, &sctx) != CUDA_SUCCESS || sctx != dev->ctx)
        st = violation(cudlaErrorInvalidParam, "submit: stream %p is not of the device handle's CUDA context",
                       stream);
    for (uint32_t k = 0; st == cudlaSuccess && k < numTasks; k++) st = check_task(dev, &ptrToTasks[k], k);
    if (st == cudlaSuccess && call == env_u64("DLA_EMU_FAIL_SUBMIT_N", 0))
        st = violation(env_status("DLA_EMU_FAIL_SUBMIT_STATUS", cudlaErrorUmd),
                       "submit: injected failure of call %llu (DLA_EMU_FAIL_SUBMIT_N)", (unsigned long long)call);
    if (st != cudlaSuccess) { pthread_mutex_unlock(&g_lock); return st; }

    struct cudlaModule_t *m = dev->module;
    uint64_t hold_ns = emu_task_hold_ns();
    CUdeviceptr in_ptr[EMU_MAX_TENSORS * 8], out_ptr[EMU_MAX_TENSORS * 8];
    job_t *jobs[8];
    uint32_t n = numTasks > 8 ? 8 : numTasks;
    if (numTasks > 8) { pthread_mutex_unlock(&g_lock); return violation(cudlaErrorInvalidParam, "submit: > 8 tasks"); }
    for (uint32_t k = 0; k < n; k++) {
        for (uint32_t i = 0; i < m->l.num_inputs; i++)
            in_ptr[k * EMU_MAX_TENSORS + i] = find_reg(dev, ptrToTasks[k].inputTensor[i])->ptr;
        for (uint32_t i = 0; i < m->l.num_outputs; i++)
            out_ptr[k * EMU_MAX_TENSORS + i] = find_reg(dev, ptrToTasks[k].outputTensor[i])->ptr;
        jobs[k] = calloc(1, sizeof(job_t));
        if (!jobs[k]) { for (uint32_t j = 0; j < k; j++) free(jobs[j]); pthread_mutex_unlock(&g_lock);
                        return cudlaErrorOutOfResources; }
        jobs[k]->mod = m;
        jobs[k]->submit_tid = gettid();
        uint64_t task_no = ++g_tasks_submitted;
        if (task_no == env_u64("DLA_EMU_FAULT_TASK_N", 0)) {
            jobs[k]->fault = 1;
            jobs[k]->fault_status = env_status("DLA_EMU_FAULT_STATUS", cudlaErrorDlaErrEngineTimeout);
        }
        jobs[k]->end_ns = emu_claim_core(dev->core, hold_ns);
        m->pending++;
    }
    pthread_mutex_unlock(&g_lock);
    for (uint32_t k = 0; k < n; k++) {
        st = enqueue(dev, &ptrToTasks[k], (CUstream)stream, &in_ptr[k * EMU_MAX_TENSORS],
                     &out_ptr[k * EMU_MAX_TENSORS], jobs[k]);
        if (st != cudlaSuccess) return violation(st, "submit: enqueueing task %u on the stream failed", k);
    }
    return cudlaSuccess;
}
