/*
 * reduce.cu - weft's reduction, division and (through memtype.c) copy kernels for CUDA
 * memory: the device half of kernels/reduce.c, with its semantics (cuda_kern.h).
 *
 * Every dtype x op is one instantiation of k_reduce. A thread moves 16 bytes per step
 * (one uint4 load of each input, one store) when dst, a and b are all 16-byte aligned,
 * which the engine's buffers are except at odd offsets; otherwise, and for the tail that
 * does not fill a vector, it goes element by element. fp16/bf16 are widened to fp32,
 * reduced, and rounded once to nearest even (__float2half_rn / __float2bfloat16_rn:
 * the host kernels' rounding). Integer SUM/PROD are computed in the unsigned type of the
 * width, so signed overflow wraps as on the host instead of being undefined.
 *
 * Invariant: each thread reads element i of both inputs before writing element i and
 * no thread touches another's elements, so dst == a or dst == b is safe.
 * Launches only enqueue on the caller's stream; nothing here synchronizes.
 * k_multi is the one-pass kernel of the CUDA IPC collectives (kernels/cuda/ipc.c): up to
 * CUDA_MULTI_MAX sources reduced into up to as many destinations (peers' buffers mapped
 * into this process), the same 16-byte vectors when every pointer is aligned.
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include "cuda_kern.h"

namespace {

/* Storage type -> the type it is reduced in, and the conversions. */
template <typename T> struct acc_of {
    typedef T type;
    static __device__ __forceinline__ T load(T x) { return x; }
    static __device__ __forceinline__ T store(T x) { return x; }
};
template <> struct acc_of<__half> {
    typedef float type;
    static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half store(float x) { return __float2half_rn(x); }
};
template <> struct acc_of<__nv_bfloat16> {
    typedef float type;
    static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 store(float x)
    {
        return __float2bfloat16_rn(x);
    }
};

/* Integers wrap in their unsigned type; floating types have no such type. */
template <typename T> struct wrap_of { typedef T type; static const bool is_int = true; };
template <> struct wrap_of<int8_t> { typedef uint8_t type; static const bool is_int = true; };
template <> struct wrap_of<int32_t> { typedef uint32_t type; static const bool is_int = true; };
template <> struct wrap_of<int64_t> { typedef uint64_t type; static const bool is_int = true; };
template <> struct wrap_of<float> { typedef float type; static const bool is_int = false; };
template <> struct wrap_of<double> { typedef double type; static const bool is_int = false; };

template <int OP, typename A>
__device__ __forceinline__ A apply(A x, A y, int div)
{
    typedef typename wrap_of<A>::type U;
    if (OP == WEFT_SUM || OP == WEFT_AVG) {
        A s = (A)((U)x + (U)y);
        return (OP == WEFT_AVG && div > 1) ? (A)(s / div) : s;    /* int div: no narrowing */
    }
    if (OP == WEFT_PROD)
        return (A)((U)x * (U)y);
    if (wrap_of<A>::is_int)
        return OP == WEFT_MIN ? (x < y ? x : y) : (x > y ? x : y);
    /* floating MIN/MAX: NaN in either input gives NaN; equal inputs give y (the host's rule) */
    if (OP == WEFT_MIN)
        return (x < y || x != x) ? x : y;
    return (x > y || x != x) ? x : y;
}

template <typename T, int OP>
__device__ __forceinline__ T elem(T x, T y, int div)
{
    typedef acc_of<T> C;
    return C::store(apply<OP>(C::load(x), C::load(y), div));
}

template <typename T, int OP>
__global__ void k_reduce(T *d, const T *a, const T *b, size_t n, int div, int vec)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec) {
        const int V = 16 / sizeof(T);
        size_t nv = n / V;
        for (size_t v = i; v < nv; v += stride) {
            uint4 ua = reinterpret_cast<const uint4 *>(a)[v];
            uint4 ub = reinterpret_cast<const uint4 *>(b)[v];
            uint4 ud;
            const T *ta = reinterpret_cast<const T *>(&ua);
            const T *tb = reinterpret_cast<const T *>(&ub);
            T *td = reinterpret_cast<T *>(&ud);
#pragma unroll
            for (int j = 0; j < V; j++)
                td[j] = elem<T, OP>(ta[j], tb[j], div);
            reinterpret_cast<uint4 *>(d)[v] = ud;
        }
        done = nv * V;
    }
    for (size_t k = done + i; k < n; k += stride)
        d[k] = elem<T, OP>(a[k], b[k], div);
}

template <typename T>
__global__ void k_divide(T *d, const T *s, size_t n, int div)
{
    typedef acc_of<T> C;
    typedef typename C::type A;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        d[k] = C::store((A)(C::load(s[k]) / div));
}

/* d[k] = s[k] * the scalar (read from sp when it is not NULL, when the kernel runs: NCCL's
 * ncclScalarDevice; else sv), in the reduction type, as kern_premul. */
template <typename T>
__global__ void k_premul(T *d, const T *s, size_t n, const T *sp, T sv)
{
    typedef acc_of<T> C;
    typedef typename C::type A;
    A k = C::load(sp ? *sp : sv);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        d[i] = C::store(apply<WEFT_PROD>(C::load(s[i]), k, 0));
}

/* cuda_kern_multi: every dst[k] = src[0] op ... op src[nsrc-1], accumulated in the
 * reduction type (fp16/bf16 in fp32, rounded once; AVG sums and divides once at the
 * end). A thread reads element i of every source before writing element i anywhere. */
template <typename T, int OP>
__device__ __forceinline__ T multi_elem(const cuda_multi_t &m, size_t k)
{
    typedef acc_of<T> C;
    typedef typename C::type A;
    const int ACC = OP == WEFT_AVG ? WEFT_SUM : OP;
    A acc = C::load(static_cast<const T *>(m.src[0])[k]);
    for (int j = 1; j < m.nsrc; j++)
        acc = apply<ACC>(acc, C::load(static_cast<const T *>(m.src[j])[k]), 0);
    if (OP == WEFT_AVG && m.div > 1)
        acc = (A)(acc / m.div);
    return C::store(acc);
}

template <typename T, int OP>
__device__ __forceinline__ void multi_body(const cuda_multi_t &m)
{
    typedef acc_of<T> C;
    typedef typename C::type A;
    const int ACC = OP == WEFT_AVG ? WEFT_SUM : OP;
    if (m.ndst <= 0 || m.nsrc <= 0)
        return;
    uintptr_t al = 0;
    for (int k = 0; k < m.ndst; k++)
        al |= (uintptr_t)m.dst[k];
    for (int k = 0; k < m.nsrc; k++)
        al |= (uintptr_t)m.src[k];
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if ((al & 15) == 0) {
        const int V = 16 / sizeof(T);
        size_t nv = m.n / V;
        for (size_t v = i; v < nv; v += stride) {
            A acc[V];
            uint4 u = static_cast<const uint4 *>(m.src[0])[v];
            const T *t = reinterpret_cast<const T *>(&u);
#pragma unroll
            for (int e = 0; e < V; e++)
                acc[e] = C::load(t[e]);
            for (int j = 1; j < m.nsrc; j++) {
                u = static_cast<const uint4 *>(m.src[j])[v];
#pragma unroll
                for (int e = 0; e < V; e++)
                    acc[e] = apply<ACC>(acc[e], C::load(t[e]), 0);
            }
            uint4 out;
            T *o = reinterpret_cast<T *>(&out);
#pragma unroll
            for (int e = 0; e < V; e++)
                o[e] = C::store((OP == WEFT_AVG && m.div > 1) ? (A)(acc[e] / m.div) : acc[e]);
            for (int k = 0; k < m.ndst; k++)
                static_cast<uint4 *>(m.dst[k])[v] = out;
        }
        done = nv * V;
    }
    for (size_t k = done + i; k < m.n; k += stride) {
        T r = multi_elem<T, OP>(m, k);
        for (int d = 0; d < m.ndst; d++)
            static_cast<T *>(m.dst[d])[k] = r;
    }
}

template <typename T, int OP>
__global__ void k_multi(const cuda_multi_t m)
{
    multi_body<T, OP>(m);
}

/* The work is in memory the host fills after the launch was enqueued (behind a wait on
 * the stream): each block reads it once into shared memory. */
template <typename T, int OP>
__global__ void k_multi_ind(const cuda_multi_t *pm)
{
    __shared__ cuda_multi_t m;
    const volatile unsigned *from = reinterpret_cast<const volatile unsigned *>(pm);
    unsigned *to = reinterpret_cast<unsigned *>(&m);
    for (unsigned k = threadIdx.x; k < sizeof(cuda_multi_t) / 4; k += blockDim.x)
        to[k] = from[k];
    __syncthreads();
    multi_body<T, OP>(m);
}

/* The stream queue's work, from the mapped host memory the host filled into device
 * memory, once: k_multi_ind's blocks then read it there (from L2), not each of them
 * across PCIe. */
__global__ void k_fetch(unsigned *dst, const unsigned *src, size_t words)
{
    const volatile unsigned *from = src;
    for (size_t k = threadIdx.x; k < words; k += blockDim.x)
        dst[k] = from[k];
}

const int THREADS = 256;
const unsigned MAX_BLOCKS = 4096;       /* grid-stride beyond: enough to fill an H100 */

unsigned blocks_for(size_t work)
{
    size_t b = (work + THREADS - 1) / THREADS;
    return b == 0 ? 1 : (b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)b);
}

template <typename T>
int launch_reduce(void *dst, const void *a, const void *b, size_t n, weft_op_t op, int div,
                  cudaStream_t st)
{
    int vec = (((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) & 15) == 0;
    unsigned g = blocks_for(vec ? n / (16 / sizeof(T)) + 1 : n);
    T *d = (T *)dst;
    const T *x = (const T *)a, *y = (const T *)b;
    switch (op) {
    case WEFT_SUM: k_reduce<T, WEFT_SUM><<<g, THREADS, 0, st>>>(d, x, y, n, div, vec); break;
    case WEFT_PROD: k_reduce<T, WEFT_PROD><<<g, THREADS, 0, st>>>(d, x, y, n, div, vec); break;
    case WEFT_MIN: k_reduce<T, WEFT_MIN><<<g, THREADS, 0, st>>>(d, x, y, n, div, vec); break;
    case WEFT_MAX: k_reduce<T, WEFT_MAX><<<g, THREADS, 0, st>>>(d, x, y, n, div, vec); break;
    case WEFT_AVG: k_reduce<T, WEFT_AVG><<<g, THREADS, 0, st>>>(d, x, y, n, div, vec); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

template <typename T>
int launch_divide(void *dst, const void *src, size_t n, int div, cudaStream_t st)
{
    k_divide<T><<<blocks_for(n), THREADS, 0, st>>>((T *)dst, (const T *)src, n, div);
    return (int)cudaGetLastError();
}

template <typename T>
int launch_premul(void *dst, const void *src, size_t n, const void *sdev, const void *shost,
                 cudaStream_t st)
{
    T sv;
    memset(&sv, 0, sizeof(sv));
    if (shost)
        memcpy(&sv, shost, sizeof(sv));
    k_premul<T><<<blocks_for(n), THREADS, 0, st>>>((T *)dst, (const T *)src, n, (const T *)sdev,
                                                   sv);
    return (int)cudaGetLastError();
}

/* ind NULL: m's work by value; else ind (device-visible) holds it, filled later, and
 * m->n only sizes the grid. */
template <typename T>
int launch_multi(const cuda_multi_t *m, const cuda_multi_t *ind, weft_op_t op, cudaStream_t st)
{
    unsigned g = blocks_for(m->n / (16 / sizeof(T)) + 1);
#define K(O) (ind ? (k_multi_ind<T, O><<<g, THREADS, 0, st>>>(ind), 0) \
                  : (k_multi<T, O><<<g, THREADS, 0, st>>>(*m), 0))
    switch (op) {
    case WEFT_SUM: K(WEFT_SUM); break;
    case WEFT_PROD: K(WEFT_PROD); break;
    case WEFT_MIN: K(WEFT_MIN); break;
    case WEFT_MAX: K(WEFT_MAX); break;
    case WEFT_AVG: K(WEFT_AVG); break;
    default: return (int)cudaErrorInvalidValue;
    }
#undef K
    return (int)cudaGetLastError();
}

int multi_dispatch(const cuda_multi_t *m, const cuda_multi_t *ind, weft_dtype_t dtype,
                   weft_op_t op, cudaStream_t st)
{
    switch (dtype) {
    case WEFT_INT8: return launch_multi<int8_t>(m, ind, op, st);
    case WEFT_UINT8: return launch_multi<uint8_t>(m, ind, op, st);
    case WEFT_INT32: return launch_multi<int32_t>(m, ind, op, st);
    case WEFT_UINT32: return launch_multi<uint32_t>(m, ind, op, st);
    case WEFT_INT64: return launch_multi<int64_t>(m, ind, op, st);
    case WEFT_UINT64: return launch_multi<uint64_t>(m, ind, op, st);
    case WEFT_FLOAT16: return launch_multi<__half>(m, ind, op, st);
    case WEFT_BFLOAT16: return launch_multi<__nv_bfloat16>(m, ind, op, st);
    case WEFT_FLOAT32: return launch_multi<float>(m, ind, op, st);
    case WEFT_FLOAT64: return launch_multi<double>(m, ind, op, st);
    }
    return (int)cudaErrorInvalidValue;
}

} /* namespace */

extern "C" int cuda_kern_multi(const cuda_multi_t *m, weft_dtype_t dtype, weft_op_t op,
                               void *stream)
{
    if (m->n == 0 || m->ndst == 0)
        return 0;
    if (m->nsrc < 1 || m->nsrc > CUDA_MULTI_MAX || m->ndst < 0 || m->ndst > CUDA_MULTI_MAX)
        return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    if (m->nsrc == 1 && m->ndst == 1 && !(op == WEFT_AVG && m->div > 1))  /* a copy */
        return m->dst[0] == m->src[0]
                   ? 0 : (int)cudaMemcpyAsync(m->dst[0], m->src[0],
                                              m->n * weft_dtype_size(dtype),
                                              cudaMemcpyDefault, st);
    return multi_dispatch(m, NULL, dtype, op, st);
}

extern "C" int cuda_kern_multi_preload(const cuda_multi_t *ind, void *stream)
{
    static const weft_dtype_t dts[] = { WEFT_INT8, WEFT_UINT8, WEFT_INT32, WEFT_UINT32,
                                        WEFT_INT64, WEFT_UINT64, WEFT_FLOAT16, WEFT_BFLOAT16,
                                        WEFT_FLOAT32, WEFT_FLOAT64 };
    static const weft_op_t ops[] = { WEFT_SUM, WEFT_PROD, WEFT_MIN, WEFT_MAX, WEFT_AVG };
    cuda_multi_t m;
    m.n = 1;
    for (unsigned d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
        for (unsigned o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
            int e = multi_dispatch(&m, ind, dts[d], ops[o], (cudaStream_t)stream);
            if (e)
                return e;
        }
    /* PreMulSum's kernel (the NCCL shim launches it on a stream the queue may hold
     * behind a wait): loaded now, as cudaFuncGetAttributes does, without running it */
    cudaFuncAttributes fa;
    int e = (int)cudaFuncGetAttributes(&fa, k_fetch);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<int8_t>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<uint8_t>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<int32_t>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<uint32_t>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<int64_t>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<uint64_t>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<__half>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<__nv_bfloat16>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<float>);
    e = e ? e : (int)cudaFuncGetAttributes(&fa, k_premul<double>);
    if (e)
        return e;
    return (int)cudaStreamSynchronize((cudaStream_t)stream);
}

extern "C" int cuda_kern_fetch(void *dst, const void *src, size_t bytes, void *stream)
{
    if (bytes == 0)
        return 0;
    if (bytes % 4 != 0 || ((uintptr_t)dst | (uintptr_t)src) % 4 != 0)
        return (int)cudaErrorInvalidValue;
    k_fetch<<<1, 256, 0, (cudaStream_t)stream>>>((unsigned *)dst, (const unsigned *)src,
                                                 bytes / 4);
    return (int)cudaGetLastError();
}

extern "C" int cuda_kern_multi_ind(const cuda_multi_t *ind, size_t n, weft_dtype_t dtype,
                                   weft_op_t op, void *stream)
{
    if (n == 0)
        return 0;
    cuda_multi_t m;
    m.n = n;
    return multi_dispatch(&m, ind, dtype, op, (cudaStream_t)stream);
}

extern "C" int cuda_kern_reduce(void *dst, const void *a, const void *b, size_t n,
                                weft_dtype_t dtype, weft_op_t op, int avg_div, void *stream)
{
    if (n == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    switch (dtype) {
    case WEFT_INT8: return launch_reduce<int8_t>(dst, a, b, n, op, avg_div, st);
    case WEFT_UINT8: return launch_reduce<uint8_t>(dst, a, b, n, op, avg_div, st);
    case WEFT_INT32: return launch_reduce<int32_t>(dst, a, b, n, op, avg_div, st);
    case WEFT_UINT32: return launch_reduce<uint32_t>(dst, a, b, n, op, avg_div, st);
    case WEFT_INT64: return launch_reduce<int64_t>(dst, a, b, n, op, avg_div, st);
    case WEFT_UINT64: return launch_reduce<uint64_t>(dst, a, b, n, op, avg_div, st);
    case WEFT_FLOAT16: return launch_reduce<__half>(dst, a, b, n, op, avg_div, st);
    case WEFT_BFLOAT16: return launch_reduce<__nv_bfloat16>(dst, a, b, n, op, avg_div, st);
    case WEFT_FLOAT32: return launch_reduce<float>(dst, a, b, n, op, avg_div, st);
    case WEFT_FLOAT64: return launch_reduce<double>(dst, a, b, n, op, avg_div, st);
    }
    return (int)cudaErrorInvalidValue;
}

extern "C" int cuda_kern_divide(void *dst, const void *src, size_t n, weft_dtype_t dtype,
                                int div, void *stream)
{
    if (n == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (div <= 1)       /* as kern_divide: nothing to divide by, a copy */
        return dst == src ? 0
                          : (int)cudaMemcpyAsync(dst, src, n * weft_dtype_size(dtype),
                                                 cudaMemcpyDefault, st);
    switch (dtype) {
    case WEFT_INT8: return launch_divide<int8_t>(dst, src, n, div, st);
    case WEFT_UINT8: return launch_divide<uint8_t>(dst, src, n, div, st);
    case WEFT_INT32: return launch_divide<int32_t>(dst, src, n, div, st);
    case WEFT_UINT32: return launch_divide<uint32_t>(dst, src, n, div, st);
    case WEFT_INT64: return launch_divide<int64_t>(dst, src, n, div, st);
    case WEFT_UINT64: return launch_divide<uint64_t>(dst, src, n, div, st);
    case WEFT_FLOAT16: return launch_divide<__half>(dst, src, n, div, st);
    case WEFT_BFLOAT16: return launch_divide<__nv_bfloat16>(dst, src, n, div, st);
    case WEFT_FLOAT32: return launch_divide<float>(dst, src, n, div, st);
    case WEFT_FLOAT64: return launch_divide<double>(dst, src, n, div, st);
    }
    return (int)cudaErrorInvalidValue;
}

extern "C" int cuda_kern_premul(void *dst, const void *src, size_t n, weft_dtype_t dtype,
                               const void *scalar_dev, const void *scalar_host, void *stream)
{
    if (n == 0)
        return 0;
    if ((scalar_dev == NULL) == (scalar_host == NULL))
        return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    const void *sd = scalar_dev, *sh = scalar_host;
    switch (dtype) {
    case WEFT_INT8: return launch_premul<int8_t>(dst, src, n, sd, sh, st);
    case WEFT_UINT8: return launch_premul<uint8_t>(dst, src, n, sd, sh, st);
    case WEFT_INT32: return launch_premul<int32_t>(dst, src, n, sd, sh, st);
    case WEFT_UINT32: return launch_premul<uint32_t>(dst, src, n, sd, sh, st);
    case WEFT_INT64: return launch_premul<int64_t>(dst, src, n, sd, sh, st);
    case WEFT_UINT64: return launch_premul<uint64_t>(dst, src, n, sd, sh, st);
    case WEFT_FLOAT16: return launch_premul<__half>(dst, src, n, sd, sh, st);
    case WEFT_BFLOAT16: return launch_premul<__nv_bfloat16>(dst, src, n, sd, sh, st);
    case WEFT_FLOAT32: return launch_premul<float>(dst, src, n, sd, sh, st);
    case WEFT_FLOAT64: return launch_premul<double>(dst, src, n, sd, sh, st);
    }
    return (int)cudaErrorInvalidValue;
}
