/*
 * nccl.h - weft's NCCL-API header: the declarations that programs written for NCCL
 * (nccl-tests, PyTorch's ProcessGroupNCCL) compile against when they link libweft_nccl.so
 * (soname libnccl.so.2) instead of NCCL. Written for weft; it reproduces NCCL's ABI facts
 * only: the enum values, ncclUniqueId's 128 bytes, ncclConfig_t's layout and magic as of
 * NCCL 2.19 (the version this header announces, so programs leave out what later versions
 * added), and the function signatures.
 *
 * What weft does not support returns ncclInvalidUsage (or ncclInvalidArgument for a bad
 * value) with the reason in ncclGetLastError(); nothing here aborts the process.
 * docs/GPU.md lists what is supported.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 19
#define NCCL_PATCH 3
#define NCCL_SUFFIX "-weft"

#define NCCL_VERSION(X, Y, Z) \
    (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1

typedef struct ncclConfig_v21700 {
    /* set by NCCL_CONFIG_INITIALIZER; checked by the init calls */
    size_t size;
    unsigned int magic;
    unsigned int version;
    /* optional */
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER {                                      \
    sizeof(ncclConfig_t),                   /* size */                 \
    0xcafebeef,                             /* magic */                \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */    \
    NCCL_CONFIG_UNDEF_INT,                  /* blocking */             \
    NCCL_CONFIG_UNDEF_INT,                  /* cgaClusterSize */       \
    NCCL_CONFIG_UNDEF_INT,                  /* minCTAs */              \
    NCCL_CONFIG_UNDEF_INT,                  /* maxCTAs */              \
    NCCL_CONFIG_UNDEF_PTR,                  /* netName */              \
    NCCL_CONFIG_UNDEF_INT                   /* splitShare */           \
}

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,         /* ops made by ncclRedOpCreatePreMulSum start here */
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(int))
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,    /* declared for source compatibility; weft refuses fp8 */
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
    ncclScalarDevice = 0,
    ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                    int rank, ncclConfig_t *config);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* Every call again under NCCL's profiling name, pnccl*: a tool defines ncclX, does its
 * work, and calls pncclX (the same function). */
extern __typeof__(ncclAllGather) pncclAllGather;
extern __typeof__(ncclAllReduce) pncclAllReduce;
extern __typeof__(ncclBcast) pncclBcast;
extern __typeof__(ncclBroadcast) pncclBroadcast;
extern __typeof__(ncclCommAbort) pncclCommAbort;
extern __typeof__(ncclCommCount) pncclCommCount;
extern __typeof__(ncclCommCuDevice) pncclCommCuDevice;
extern __typeof__(ncclCommDeregister) pncclCommDeregister;
extern __typeof__(ncclCommDestroy) pncclCommDestroy;
extern __typeof__(ncclCommFinalize) pncclCommFinalize;
extern __typeof__(ncclCommGetAsyncError) pncclCommGetAsyncError;
extern __typeof__(ncclCommInitAll) pncclCommInitAll;
extern __typeof__(ncclCommInitRank) pncclCommInitRank;
extern __typeof__(ncclCommInitRankConfig) pncclCommInitRankConfig;
extern __typeof__(ncclCommRegister) pncclCommRegister;
extern __typeof__(ncclCommSplit) pncclCommSplit;
extern __typeof__(ncclCommUserRank) pncclCommUserRank;
extern __typeof__(ncclGetErrorString) pncclGetErrorString;
extern __typeof__(ncclGetLastError) pncclGetLastError;
extern __typeof__(ncclGetUniqueId) pncclGetUniqueId;
extern __typeof__(ncclGetVersion) pncclGetVersion;
extern __typeof__(ncclGroupEnd) pncclGroupEnd;
extern __typeof__(ncclGroupStart) pncclGroupStart;
extern __typeof__(ncclMemAlloc) pncclMemAlloc;
extern __typeof__(ncclMemFree) pncclMemFree;
extern __typeof__(ncclRecv) pncclRecv;
extern __typeof__(ncclRedOpCreatePreMulSum) pncclRedOpCreatePreMulSum;
extern __typeof__(ncclRedOpDestroy) pncclRedOpDestroy;
extern __typeof__(ncclReduce) pncclReduce;
extern __typeof__(ncclReduceScatter) pncclReduceScatter;
extern __typeof__(ncclSend) pncclSend;

#ifdef __cplusplus
}
#endif
#endif /* NCCL_H_ */
