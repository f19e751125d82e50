/* nccl.h - HOST STAND-IN of NCCL (tests/standin): communicators over MPI
 * between the ranks' processes, the calls this project makes. Not NCCL. */
#ifndef PP_STANDIN_NCCL_H
#define PP_STANDIN_NCCL_H
#include <stddef.h>
#include "cuda_runtime_api.h"
#ifdef __cplusplus
extern "C" {
#endif
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;
typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclFloat32 = 7,
    ncclFloat = 7
} ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
typedef struct pp_si_nccl *ncclComm_t;
typedef struct ncclConfig_v21700 ncclConfig_t;
#define NCCL_SPLIT_NOCOLOR -1

const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t c);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *cfg);
ncclResult_t ncclCommDestroy(ncclComm_t c);
ncclResult_t ncclCommAbort(ncclComm_t c);
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *async);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c,
                      cudaStream_t st);
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c,
                      cudaStream_t st);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t st);
#ifdef __cplusplus
}
#endif
#endif
