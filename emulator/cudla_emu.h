/*
 * DLA EMULATOR (test infrastructure) -- not NVIDIA's cuDLA.
 *
 * The cuDLA C API as this emulator implements it, declared from the public cuDLA API reference
 * (docs.nvidia.com/cuda/cudla-api) and checked against the struct layouts that cuda.bindings.cudla
 * (cuda-bindings 13.3) passes across the boundary. Only what the Python binding resolves is declared.
 */
#ifndef CUDLA_EMU_H
#define CUDLA_EMU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    cudlaSuccess = 0,
    cudlaErrorInvalidParam = 1,
    cudlaErrorOutOfResources = 2,
    cudlaErrorCreationFailed = 3,
    cudlaErrorInvalidAddress = 4,
    cudlaErrorOs = 5,
    cudlaErrorCuda = 6,
    cudlaErrorUmd = 7,
    cudlaErrorInvalidDevice = 8,
    cudlaErrorInvalidAttribute = 9,
    cudlaErrorIncompatibleDlaSWVersion = 10,
    cudlaErrorMemoryRegistered = 11,
    cudlaErrorInvalidModule = 12,
    cudlaErrorUnsupportedOperation = 13,
    cudlaErrorNvSci = 14,
    cudlaErrorDriverNotFound = 15,
    cudlaErrorDlaErrInvalidInput = 0x40000001,
    cudlaErrorDlaErrInvalidPreAction = 0x40000002,
    cudlaErrorDlaErrNoMem = 0x40000003,
    cudlaErrorDlaErrProcessorBusy = 0x40000004,
    cudlaErrorDlaErrTaskStatusMismatch = 0x40000005,
    cudlaErrorDlaErrEngineTimeout = 0x40000006,
    cudlaErrorDlaErrDataMismatch = 0x40000007,
    cudlaErrorUnknown = 0x7fffffff
} cudlaStatus;

typedef enum { CUDLA_CUDA_DLA = 0, CUDLA_STANDALONE = 1 } cudlaMode;

typedef enum {
    CUDLA_NUM_INPUT_TENSORS = 0,
    CUDLA_NUM_OUTPUT_TENSORS = 1,
    CUDLA_INPUT_TENSOR_DESCRIPTORS = 2,
    CUDLA_OUTPUT_TENSOR_DESCRIPTORS = 3,
    CUDLA_NUM_OUTPUT_TASK_STATISTICS = 4,
    CUDLA_OUTPUT_TASK_STATISTICS_DESCRIPTORS = 5
} cudlaModuleAttributeType;

typedef enum { CUDLA_UNIFIED_ADDRESSING = 0, CUDLA_DEVICE_VERSION = 1 } cudlaDevAttributeType;

typedef enum { CUDLA_NVSCISYNC_FENCE = 1, CUDLA_NVSCISYNC_FENCE_SOF = 2 } cudlaFenceType;

typedef struct cudlaDevHandle_t *cudlaDevHandle;
typedef struct cudlaModule_t *cudlaModule;
/* standalone-mode descriptors: only passed by pointer to the stubs below, so left incomplete here */
typedef struct cudlaExternalMemoryHandleDesc_t cudlaExternalMemoryHandleDesc;
typedef struct cudlaExternalSemaphoreHandleDesc_t cudlaExternalSemaphoreHandleDesc;

#define CUDLA_RADIX_NAME_LEN 81 /* 80 characters + NUL, as the binding's name[81] */

typedef struct cudlaModuleTensorDescriptor {
    char name[CUDLA_RADIX_NAME_LEN];
    uint64_t size;
    uint64_t n;
    uint64_t c;
    uint64_t h;
    uint64_t w;
    uint8_t dataFormat;
    uint8_t dataType;
    uint8_t dataCategory;
    uint8_t pixelFormat;
    uint8_t pixelMapping;
    uint32_t stride[8];
} cudlaModuleTensorDescriptor;

typedef union cudlaModuleAttribute {
    uint32_t numInputTensors;
    uint32_t numOutputTensors;
    cudlaModuleTensorDescriptor *inputTensorDesc;
    cudlaModuleTensorDescriptor *outputTensorDesc;
} cudlaModuleAttribute;

typedef union cudlaDevAttribute {
    uint8_t unifiedAddressingSupported;
    uint32_t deviceVersion;
} cudlaDevAttribute;

typedef struct CudlaFence {
    void *fence;
    cudlaFenceType type;
} CudlaFence;

typedef struct cudlaWaitEvents {
    CudlaFence *preFences;
    uint32_t numEvents;
} cudlaWaitEvents;

typedef struct cudlaSignalEvents {
    uint64_t **devPtrs;
    CudlaFence *eofFences;
    uint32_t numEvents;
} cudlaSignalEvents;

typedef struct cudlaTask {
    cudlaModule moduleHandle;
    uint64_t **outputTensor;
    uint32_t numOutputTensors;
    uint32_t numInputTensors;
    uint64_t **inputTensor;
    cudlaWaitEvents *waitEvents;
    cudlaSignalEvents *signalEvents;
} cudlaTask;

#define EMU_API __attribute__((visibility("default")))

EMU_API cudlaStatus cudlaGetVersion(uint64_t *const version);
EMU_API cudlaStatus cudlaDeviceGetCount(uint64_t *const pNumDevices);
EMU_API cudlaStatus cudlaCreateDevice(const uint64_t device, cudlaDevHandle *const devHandle, const uint32_t flags);
EMU_API cudlaStatus cudlaDestroyDevice(const cudlaDevHandle devHandle);
EMU_API cudlaStatus cudlaDeviceGetAttribute(const cudlaDevHandle devHandle, const cudlaDevAttributeType attrib,
                                            cudlaDevAttribute *const pAttribute);
EMU_API cudlaStatus cudlaModuleLoadFromMemory(const cudlaDevHandle devHandle, const uint8_t *const pModule,
                                              const size_t moduleSize, cudlaModule *const hModule,
                                              const uint32_t flags);
EMU_API cudlaStatus cudlaModuleGetAttributes(const cudlaModule hModule, const cudlaModuleAttributeType attrType,
                                             cudlaModuleAttribute *const attribute);
EMU_API cudlaStatus cudlaModuleUnload(const cudlaModule hModule, const uint32_t flags);
EMU_API cudlaStatus cudlaMemRegister(const cudlaDevHandle devHandle, const uint64_t *const ptr, const size_t size,
                                     uint64_t **const devPtr, const uint32_t flags);
EMU_API cudlaStatus cudlaMemUnregister(const cudlaDevHandle devHandle, const uint64_t *const devPtr);
EMU_API cudlaStatus cudlaSubmitTask(const cudlaDevHandle devHandle, const cudlaTask *const ptrToTasks,
                                    const uint32_t numTasks, void *const stream, const uint32_t flags);
EMU_API cudlaStatus cudlaGetLastError(const cudlaDevHandle devHandle);
EMU_API cudlaStatus cudlaSetTaskTimeoutInMs(const cudlaDevHandle devHandle, const uint32_t timeout);
/* standalone mode / NvSci: declared with NVIDIA's parameter types, answered with ErrorUnsupportedOperation */
EMU_API cudlaStatus cudlaImportExternalMemory(const cudlaDevHandle devHandle,
                                              const cudlaExternalMemoryHandleDesc *const desc,
                                              uint64_t **const devPtr, const uint32_t flags);
EMU_API cudlaStatus cudlaImportExternalSemaphore(const cudlaDevHandle devHandle,
                                                 const cudlaExternalSemaphoreHandleDesc *const desc,
                                                 uint64_t **const devPtr, const uint32_t flags);
EMU_API cudlaStatus cudlaGetNvSciSyncAttributes(uint64_t *attrList, const uint32_t flags);

/* Not in cuDLA: debug queries of the emulator, for tests (ctypes) and the doctor's record. */
EMU_API int dlaEmuIsEmulator(void);
EMU_API int dlaEmuLiveDevices(void);
EMU_API int dlaEmuLiveModules(void);
EMU_API int dlaEmuLiveRegistrations(void);
EMU_API uint64_t dlaEmuSubmitCount(void);   /* tasks submitted (DLA_EMU_FAULT_TASK_N counts these) */
EMU_API uint64_t dlaEmuSubmitCalls(void);   /* cudlaSubmitTask calls (DLA_EMU_FAIL_SUBMIT_N) */
EMU_API uint64_t dlaEmuRegisterCalls(void); /* cudlaMemRegister calls (DLA_EMU_FAIL_REGISTER_N) */
EMU_API uint64_t dlaEmuTasksRun(void);
EMU_API uint64_t dlaEmuHostCpuNs(void);          /* host thread CPU the task programs took (not the holds) */
/* ... of which on the submitting thread itself (a driver that runs host functions inline, as the CPU fake
 * does); the rest ran on the driver's host-function thread, which the emulator names DLA_EMU_HOST_THREAD */
EMU_API uint64_t dlaEmuInlineHostCpuNs(void);
#define DLA_EMU_HOST_THREAD "dla-emu-host"
EMU_API const char *dlaEmuHostThreadName(void);  /* DLA_EMU_HOST_THREAD */
EMU_API uint64_t dlaEmuCoreTasks(uint64_t core); /* tasks that claimed time on a core (DLA_EMU_TASK_MS set) */
/* Program "network": the host runs the network. The callback gets the whole loadable (records + params,
 * so it reads the layouts itself) and the task's host copies of the inputs / outputs (descriptor sizes);
 * it returns 0 on success. Runs on the CUDA driver's host-function thread: no CUDA calls inside. */
typedef int (*dlaEmuNetworkFn)(void *user, const uint8_t *loadable, uint64_t loadable_size,
                               uint8_t *const *inputs, uint8_t *const *outputs);
EMU_API void dlaEmuSetNetworkCallback(dlaEmuNetworkFn fn, void *user);
EMU_API uint64_t dlaEmuNetworkFailures(void); /* network tasks whose callback failed (outputs = 0xA5) */
EMU_API const char *dlaEmuLastViolation(void);

#ifdef __cplusplus
}
#endif
#endif
