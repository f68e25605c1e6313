/*
 * DLA EMULATOR (test infrastructure): the cuDLA entry points (hybrid mode) with the contract checks.
 * Every refusal is recorded (dlaEmuLastViolation) and returns the status listed in emulator/README.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_state.h"

#define EMU_LIB_VERSION 1005000u /* reported by cudlaGetVersion: 1.5.0 in cuDLA's major*1e6+minor*1e3 form */

#define LOCK() pthread_mutex_lock(&g_lock)
#define UNLOCK_RETURN(x) do { cudlaStatus _s = (x); pthread_mutex_unlock(&g_lock); return _s; } while (0)

/* A device-side trap: the only way an emulator on a discrete GPU can make the CUDA side of a stream fail.
 * CUDA then reports a sticky launch failure (the context is unusable) -- as after a real DLA fault, the
 * process must exit. (A real DLA fault shows up as cudaErrorExternalDevice, which nothing but an external
 * device can raise.) */
static const char k_fault_ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry dla_emu_fault()\n{\n\ttrap;\n}\n";

cudlaStatus cudlaGetVersion(uint64_t *const version) {
    if (!version) return cudlaErrorInvalidParam;
    *version = EMU_LIB_VERSION;
    return cudlaSuccess;
}

cudlaStatus cudlaDeviceGetCount(uint64_t *const pNumDevices) {
    if (!pNumDevices) return cudlaErrorInvalidParam;
    if (!load_driver()) return violation(cudlaErrorDriverNotFound, "libcuda.so.1 not loadable or cuInit failed");
    *pNumDevices = env_u64("DLA_EMU_DEVICE_COUNT", 2);
    return cudlaSuccess;
}

cudlaStatus cudlaCreateDevice(const uint64_t device, cudlaDevHandle *const devHandle, const uint32_t flags) {
    trace("cudlaCreateDevice(device=%llu, flags=%u)", (unsigned long long)device, flags);
    if (!devHandle) return violation(cudlaErrorInvalidParam, "create: devHandle is NULL");
    cudlaStatus inj = env_status("DLA_EMU_FAIL_CREATE", cudlaSuccess);
    if (inj != cudlaSuccess) return violation(inj, "create: injected failure (DLA_EMU_FAIL_CREATE)");
    if (flags == CUDLA_STANDALONE)
        return violation(cudlaErrorUnsupportedOperation, "create: the emulator implements hybrid mode only");
    if (flags != CUDLA_CUDA_DLA) return violation(cudlaErrorInvalidParam, "create: unknown flags %u", flags);
    if (!load_driver()) return violation(cudlaErrorDriverNotFound, "create: CUDA driver not loadable");
    if (device >= env_u64("DLA_EMU_DEVICE_COUNT", 2))
        return violation(cudlaErrorInvalidDevice, "create: device %llu >= DLA count", (unsigned long long)device);
    CUcontext ctx = NULL;
    if (d.ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx)
        return violation(cudlaErrorCuda, "create: hybrid mode needs a current CUDA context on this thread");
    LOCK();
    int live = 0;
    for (struct cudlaDevHandle_t *p = g_devs; p; p = p->next) live += p->core == device;
    if (live >= MAX_HANDLES_PER_DLA)
        UNLOCK_RETURN(violation(cudlaErrorOutOfResources, "create: %d handles already open on DLA %llu", live,
                                (unsigned long long)device));
    struct cudlaDevHandle_t *h = calloc(1, sizeof(*h));
    if (!h) UNLOCK_RETURN(cudlaErrorOutOfResources);
    h->magic = DEV_MAGIC; h->core = device; h->ctx = ctx; h->timeout_ms = 30000; h->last_error = cudlaSuccess;
    h->next = g_devs; g_devs = h;
    *devHandle = h;
    UNLOCK_RETURN(cudlaSuccess);
}

cudlaStatus cudlaDestroyDevice(const cudlaDevHandle devHandle) {
    trace("cudlaDestroyDevice(%p)", (void *)devHandle);
    LOCK();
    struct cudlaDevHandle_t *dev = find_dev(devHandle);
    if (!dev) UNLOCK_RETURN(violation(cudlaErrorInvalidDevice, "destroy: unknown device handle"));
    int nreg = dev_reg_count(dev);
    if (nreg) UNLOCK_RETURN(violation(cudlaErrorUnsupportedOperation, "destroy: %d buffers still registered", nreg));
    if (dev->module) UNLOCK_RETURN(violation(cudlaErrorUnsupportedOperation, "destroy: a module is still loaded"));
    for (struct cudlaDevHandle_t **pp = &g_devs; *pp; pp = &(*pp)->next)
        if (*pp == dev) { *pp = dev->next; break; }
    dev->magic = 0;
    free(dev);
    UNLOCK_RETURN(cudlaSuccess);
}

cudlaStatus cudlaDeviceGetAttribute(const cudlaDevHandle devHandle, const cudlaDevAttributeType attrib,
                                    cudlaDevAttribute *const pAttribute) {
    LOCK();
    if (!find_dev(devHandle)) UNLOCK_RETURN(violation(cudlaErrorInvalidDevice, "attribute: unknown handle"));
    if (!pAttribute) UNLOCK_RETURN(cudlaErrorInvalidParam);
    if (attrib == CUDLA_UNIFIED_ADDRESSING) pAttribute->unifiedAddressingSupported = 0;
    else if (attrib == CUDLA_DEVICE_VERSION) pAttribute->deviceVersion = 2; /* "DLA 2" as on Orin */
    else UNLOCK_RETURN(cudlaErrorInvalidAttribute);
    UNLOCK_RETURN(cudlaSuccess);
}

static void free_module(struct cudlaModule_t *m) {
    CUcontext dummy;
    int pushed = d.ctx_push(m->dev->ctx) == CUDA_SUCCESS;
    for (uint32_t i = 0; i < EMU_MAX_TENSORS; i++) {
        if (m->in_scratch[i]) d.mem_free_host(m->in_scratch[i]);
        if (m->out_scratch[i]) d.mem_free_host(m->out_scratch[i]);
    }
    if (pushed) d.ctx_pop(&dummy);
    free(m->blob);
    m->magic = 0;
    free(m);
}

cudlaStatus cudlaModuleLoadFromMemory(const cudlaDevHandle devHandle, const uint8_t *const pModule,
                                      const size_t moduleSize, cudlaModule *const hModule, const uint32_t flags) {
    trace("cudlaModuleLoadFromMemory(%p, size=%zu, flags=%u)", (void *)devHandle, moduleSize, flags);
    LOCK();
    struct cudlaDevHandle_t *dev = find_dev(devHandle);
    if (!dev) UNLOCK_RETURN(violation(cudlaErrorInvalidDevice, "load: unknown device handle"));
    if (!pModule || !moduleSize || !hModule) UNLOCK_RETURN(violation(cudlaErrorInvalidParam, "load: NULL/0 argument"));
    if (flags > 1) UNLOCK_RETURN(violation(cudlaErrorInvalidParam, "load: unknown flags %u", flags));
    if (dev->module)
        UNLOCK_RETURN(violation(cudlaErrorUnsupportedOperation, "load: one module per device handle"));
    cudlaStatus inj = env_status("DLA_EMU_FAIL_LOAD", cudlaSuccess);
    if (inj != cudlaSuccess) UNLOCK_RETURN(violation(inj, "load: injected failure (DLA_EMU_FAIL_LOAD)"));
    struct cudlaModule_t *m = calloc(1, sizeof(*m));
    if (!m) UNLOCK_RETURN(cudlaErrorOutOfResources);
    char why[256] = "";
    cudlaStatus st = emu_parse_loadable(pModule, moduleSize, &m->l, why, sizeof(why));
    if (st != cudlaSuccess) { free(m); UNLOCK_RETURN(violation(st, "load: %s", why)); }
    if (m->l.program == EMU_PROGRAM_NETWORK && !emu_network_ready()) {
        free(m);
        UNLOCK_RETURN(violation(cudlaErrorUnsupportedOperation, "load: program 'network' needs a host callback "
                                "(dlaEmuSetNetworkCallback; emulator/network_host.py installs one)"));
    }
    if (m->l.program == EMU_PROGRAM_NETWORK) { /* the host callback reads the whole loadable per task */
        m->blob = malloc(moduleSize);
        if (!m->blob) { free(m); UNLOCK_RETURN(cudlaErrorOutOfResources); }
        memcpy(m->blob, pModule, moduleSize);
        m->blob_size = moduleSize;
    }
    m->magic = MOD_MAGIC; m->dev = dev;
    CUcontext dummy;
    int ok = d.ctx_push(dev->ctx) == CUDA_SUCCESS;
    for (uint32_t i = 0; ok && i < m->l.num_inputs; i++)
        ok = d.mem_alloc_host((void **)&m->in_scratch[i], m->l.inputs[i].desc.size) == CUDA_SUCCESS;
    for (uint32_t i = 0; ok && i < m->l.num_outputs; i++)
        ok = d.mem_alloc_host((void **)&m->out_scratch[i], m->l.outputs[i].desc.size) == CUDA_SUCCESS;
    d.ctx_pop(&dummy);
    if (!ok) { free_module(m); UNLOCK_RETURN(violation(cudlaErrorOutOfResources, "load: scratch allocation")); }
    dev->module = m; g_modules++;
    *hModule = m;
    UNLOCK_RETURN(cudlaSuccess);
}

cudlaStatus cudlaModuleGetAttributes(const cudlaModule hModule, const cudlaModuleAttributeType attrType,
                                     cudlaModuleAttribute *const attribute) {
    LOCK();
    struct cudlaModule_t *m = valid_mod(hModule);
    if (!m) UNLOCK_RETURN(violation(cudlaErrorInvalidModule, "attributes: unknown module handle"));
    if (!attribute) UNLOCK_RETURN(violation(cudlaErrorInvalidParam, "attributes: NULL attribute"));
    switch (attrType) {
    case CUDLA_NUM_INPUT_TENSORS: attribute->numInputTensors = m->l.num_inputs; break;
    case CUDLA_NUM_OUTPUT_TENSORS: attribute->numOutputTensors = m->l.num_outputs; break;
    case CUDLA_NUM_OUTPUT_TASK_STATISTICS: attribute->numOutputTensors = 0; break;
    case CUDLA_INPUT_TENSOR_DESCRIPTORS:
    case CUDLA_OUTPUT_TENSOR_DESCRIPTORS: {
        int in = attrType == CUDLA_INPUT_TENSOR_DESCRIPTORS;
        cudlaModuleTensorDescriptor *dst = in ? attribute->inputTensorDesc : attribute->outputTensorDesc;
        if (!dst) UNLOCK_RETURN(violation(cudlaErrorInvalidParam, "attributes: NULL descriptor array"));
        uint32_t n = in ? m->l.num_inputs : m->l.num_outputs;
        for (uint32_t i = 0; i < n; i++) dst[i] = in ? m->l.inputs[i].desc : m->l.outputs[i].desc;
        break;
    }
    default: UNLOCK_RETURN(violation(cudlaErrorInvalidAttribute, "attributes: type %d", (int)attrType));
    }
    UNLOCK_RETURN(cudlaSuccess);
}

cudlaStatus cudlaModuleUnload(const cudlaModule hModule, const uint32_t flags) {
    trace("cudlaModuleUnload(%p, flags=%u)", (void *)hModule, flags);
    LOCK();
    struct cudlaModule_t *m = valid_mod(hModule);
    if (!m) UNLOCK_RETURN(violation(cudlaErrorInvalidModule, "unload: unknown module handle"));
    if (flags) UNLOCK_RETURN(violation(cudlaErrorInvalidParam, "unload: flags must be 0"));
    if (m->pending) UNLOCK_RETURN(violation(cudlaErrorUnsupportedOperation, "unload: %d tasks still running "
                                            "(synchronise the stream first)", m->pending));
    m->dev->module = NULL; g_modules--;
    free_module(m);
    UNLOCK_RETURN(cudlaSuccess);
}

cudlaStatus cudlaMemRegister(const cudlaDevHandle devHandle, const uint64_t *const ptr, const size_t size,
                             uint64_t **const devPtr, const uint32_t flags) {
    trace("cudlaMemRegister(%p, ptr=%p, size=%zu, flags=%u)", (void *)devHandle, (const void *)ptr, size, flags);
    LOCK();
    uint64_t call = ++g_register_calls;
    struct cudlaDevHandle_t *dev = find_dev(devHandle);
    if (!dev) UNLOCK_RETURN(violation(cudlaErrorInvalidDevice, "register: unknown device handle"));
    if (!ptr || !size || !devPtr) UNLOCK_RETURN(violation(cudlaErrorInvalidParam, "register: NULL/0 argument"));
    if (flags > 1) UNLOCK_RETURN(violation(cudlaErrorUnsupportedOperation, "register: flags %u", flags));
    if (call == env_u64("DLA_EMU_FAIL_REGISTER_N", 0))
        UNLOCK_RETURN(violation(env_status("DLA_EMU_FAIL_REGISTER_STATUS", cudlaErrorOutOfResources),
                                "register: injected failure of call %llu", (unsigned long long)call));
    if ((uintptr_t)ptr % 32)
        UNLOCK_RETURN(violation(cudlaErrorInvalidAddress, "register: %p is not 32-byte aligned", (const void *)ptr));
    CUdeviceptr base = 0;
    size_t extent = 0;
    if (d.mem_get_address_range(&base, &extent, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
        UNLOCK_RETURN(violation(cudlaErrorInvalidAddress, "register: %p is not CUDA device memory", (const void *)ptr));
    if ((CUdeviceptr)(uintptr_t)ptr + size > base + extent)
        UNLOCK_RETURN(violation(cudlaErrorInvalidAddress, "register: %zu bytes at %p overrun the allocation",
                                size, (const void *)ptr));
    for (reg_t *r = g_regs; r; r = r->next)
        if (r->dev == dev && r->ptr == (CUdeviceptr)(uintptr_t)ptr)
            UNLOCK_RETURN(violation(cudlaErrorMemoryRegistered, "register: %p registered twice", (const void *)ptr));
    reg_t *r = calloc(1, sizeof(*r));
    uint64_t *token = aligned_alloc(64, 64);
    if (!r || !token) { free(r); free(token); UNLOCK_RETURN(cudlaErrorOutOfResources); }
    r->dev = dev; r->ptr = (CUdeviceptr)(uintptr_t)ptr; r->size = size; r->handle = token;
    r->next = g_regs; g_regs = r;
    *devPtr = token;
    UNLOCK_RETURN(cudlaSuccess);
}

cudlaStatus cudlaMemUnregister(const cudlaDevHandle devHandle, const uint64_t *const devPtr) {
    trace("cudlaMemUnregister(%p, %p)", (void *)devHandle, (const void *)devPtr);
    LOCK();
    struct cudlaDevHandle_t *dev = find_dev(devHandle);
    if (!dev) UNLOCK_RETURN(violation(cudlaErrorInvalidDevice, "unregister: unknown device handle"));
    if (dev->module && dev->module->pending)
        UNLOCK_RETURN(violation(cudlaErrorUnsupportedOperation, "unregister: tasks still running"));
    for (reg_t **pp = &g_regs; *pp; pp = &(*pp)->next)
        if ((*pp)->dev == dev && (*pp)->handle == devPtr) {
            reg_t *r = *pp;
            *pp = r->next;
            free(r->handle);
            free(r);
            UNLOCK_RETURN(cudlaSuccess);
        }
    UNLOCK_RETURN(violation(cudlaErrorInvalidAddress, "unregister: %p is not a registered pointer of this handle",
                            (const void *)devPtr));
}

cudlaStatus cudlaGetLastError(const cudlaDevHandle devHandle) {
    LOCK();
    struct cudlaDevHandle_t *dev = find_dev(devHandle);
    UNLOCK_RETURN(dev ? dev->last_error : cudlaErrorInvalidDevice);
}

cudlaStatus cudlaSetTaskTimeoutInMs(const cudlaDevHandle devHandle, const uint32_t timeout) {
    LOCK();
    struct cudlaDevHandle_t *dev = find_dev(devHandle);
    if (!dev) UNLOCK_RETURN(violation(cudlaErrorInvalidDevice, "timeout: unknown device handle"));
    if (timeout == 0 || timeout > 1000000u)
        UNLOCK_RETURN(violation(cudlaErrorInvalidParam, "timeout: %u ms outside 1..1000000", timeout));
    dev->timeout_ms = timeout;
    UNLOCK_RETURN(cudlaSuccess);
}

/* Not implemented (standalone-mode / NvSci interop): always unsupported. */
EMU_API cudlaStatus cudlaImportExternalMemory(const cudlaDevHandle a, const cudlaExternalMemoryHandleDesc *const b,
                                              uint64_t **const c, const uint32_t f) {
    (void)a; (void)b; (void)c; (void)f;
    return cudlaErrorUnsupportedOperation;
}
EMU_API cudlaStatus cudlaImportExternalSemaphore(const cudlaDevHandle a,
                                                 const cudlaExternalSemaphoreHandleDesc *const b,
                                                 uint64_t **const c, const uint32_t f) {
    (void)a; (void)b; (void)c; (void)f;
    return cudlaErrorUnsupportedOperation;
}
EMU_API cudlaStatus cudlaGetNvSciSyncAttributes(uint64_t *a, uint32_t f) {
    (void)a; (void)f;
    return cudlaErrorUnsupportedOperation;
}

int dlaEmuIsEmulator(void) { return 1; }
int dlaEmuLiveDevices(void) { int n = 0; LOCK(); for (struct cudlaDevHandle_t *p = g_devs; p; p = p->next) n++;
                              pthread_mutex_unlock(&g_lock); return n; }
int dlaEmuLiveModules(void) { return g_modules; }
int dlaEmuLiveRegistrations(void) { int n = 0; LOCK(); for (reg_t *r = g_regs; r; r = r->next) n++;
                                    pthread_mutex_unlock(&g_lock); return n; }
uint64_t dlaEmuSubmitCount(void) { return g_tasks_submitted; }
uint64_t dlaEmuSubmitCalls(void) { return g_submit_calls; }
uint64_t dlaEmuRegisterCalls(void) { return g_register_calls; }
uint64_t dlaEmuTasksRun(void) { return g_tasks_run; }
const char *dlaEmuLastViolation(void) { return g_violation; }

const char *emu_fault_ptx(void) { return k_fault_ptx; }
