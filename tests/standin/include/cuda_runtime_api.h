/* cuda_runtime_api.h - the HOST STAND-IN of the CUDA runtime (tests/standin,
 * see tests/README.md): exactly the part of the API this project uses,
 * implemented on the CPU to test the cuda backend's logic. Not CUDA. */
#ifndef PP_STANDIN_CUDA_RUNTIME_API_H
#define PP_STANDIN_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901
} cudaError_t;

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

typedef struct pp_si_stream *cudaStream_t;
typedef struct pp_si_event *cudaEvent_t;
/* Stream capture and graphs (tests/standin/graph.cpp). */
typedef struct pp_si_graph *cudaGraph_t;
typedef struct pp_si_graph_exec *cudaGraphExec_t;
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};
enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t st);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t st);

cudaError_t cudaStreamCreate(cudaStream_t *st);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t st);
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags);

cudaError_t cudaEventCreate(cudaEvent_t *ev);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st);
cudaError_t cudaEventQuery(cudaEvent_t ev);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t st, enum cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

#ifdef __cplusplus
}
#endif

#endif
