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
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

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

} /* namespace */

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
