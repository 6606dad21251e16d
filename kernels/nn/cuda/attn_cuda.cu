/*
 * attn_cuda.cu - causal self-attention without the (T, T) matrices (declared in
 * nn_cuda.h): the online-softmax scheme of FlashAttention (Dao et al., 2022), written for
 * weft-train's --dtype bf16 on tensor cores through the WMMA API.
 *
 * Forward, a block per (batch row b, head h, tile of 64 queries), 4 warps of 16 query rows:
 * the tile's q, then each key tile at or before it (k, v), go from the fp32 qkv (B, T, 3C)
 * into shared memory as bf16; S = q k^T (bf16 products, fp32 sums) goes to shared memory,
 * where the two threads of a row fold it into the row's running max m and sum l (fp32),
 * write P = exp(S * scale - m) as bf16 and rescale their half of the row's output
 * accumulator (fp32, registers); P v adds to it. At the end out = acc / l in (B, T, C) and
 * lse = m + log l per row, which is all the backward keeps of the softmax.
 *
 * Backward, deterministic (no atomics): D = rowsum(dout * out) first; then a block per key
 * tile recomputes P^T and dP^T = v dout^T for every query tile at or after it and sums
 * dv = P^T dout and dk = dS^T q (dS = P * (dP - D) * scale) in registers; and a block per
 * query tile recomputes P and dP for every key tile at or before it and sums dq = dS k.
 * Both write their parts of dqkv (B, T, 3C), which they overwrite.
 *
 * Shapes: head size HS = C / NH of 16, 32, 64 or 128 (kcu_attention_fits); any T (rows
 * past T load as zeros and are masked). Shared memory is dynamic (over 48 KB for HS >= 64:
 * the launchers raise each kernel's limit once).
 *
 * Invariants: rows of one warp are only touched by that warp between __syncthreads (the
 * warp-level fences are __syncwarp); a tile in shared memory is replaced only after every
 * warp finished with it (the __syncthreads before each tile_put); a prefetched tile waits
 * in registers until then.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>

#include "nn_cuda.h"

using namespace nvcuda;

typedef __nv_bfloat16 bf16;

#define TILE 64        // queries or keys per tile
#define NTHR 128       // 4 warps of 16 rows
#define FULL_MASK 0xffffffffu

template <int HS> struct attn_dims {
    static constexpr int LDH = HS + 8;            // bf16 rows of a q/k/v/dout tile
    static constexpr int LDP = TILE + 8;          // bf16 rows of P or dS
    static constexpr int LDS = TILE + 4;          // fp32 rows of S or dP
    static constexpr int LDO = HS + 4;            // fp32 rows of a product into registers
    static constexpr size_t TILE_B = (size_t)TILE * LDH * sizeof(bf16);
    static constexpr size_t P_B = (size_t)TILE * LDP * sizeof(bf16);
    static constexpr size_t S_B = (size_t)TILE * LDS * sizeof(float);
    static constexpr size_t O_B = (size_t)TILE * LDO * sizeof(float);
};

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;

/* A tile is fetched into registers (every load issued before any is used, so one global
 * latency per tile, not one per load) and then put into shared memory as bf16. For heads
 * up to 64 the next tile's fetch is issued before the current tile's products (prefetch:
 * its latency hides behind them); at 128 the registers are not there, and it comes first. */
template <int HS> struct tile_regs {
    static constexpr int N = TILE * (HS / 4) / NTHR;   // float4 per thread
    static constexpr bool PF = HS <= 64;
    float4 v[N];
};

/* rows r0 .. r0+63 of a (T, HS) slice at src (row stride ld floats); rows at or past T
 * are zeros */
template <int HS>
static __device__ __forceinline__ void tile_fetch(tile_regs<HS> &t,
                                                  const float *__restrict__ src, size_t ld,
                                                  int r0, int T)
{
    constexpr int V4 = HS / 4;
#pragma unroll
    for (int it = 0; it < tile_regs<HS>::N; it++) {
        int i = threadIdx.x + it * NTHR, r = i / V4, c = (i % V4) * 4;
        t.v[it] = r0 + r < T ? __ldg(reinterpret_cast<const float4 *>(src + (size_t)(r0 + r) *
                                                                       ld + c))
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

template <int HS>
static __device__ __forceinline__ void tile_put(bf16 *dst, const tile_regs<HS> &t)
{
    constexpr int LDH = attn_dims<HS>::LDH, V4 = HS / 4;
#pragma unroll
    for (int it = 0; it < tile_regs<HS>::N; it++) {
        int i = threadIdx.x + it * NTHR, r = i / V4, c = (i % V4) * 4;
        __nv_bfloat162 *d = reinterpret_cast<__nv_bfloat162 *>(dst + r * LDH + c);
        d[0] = __floats2bfloat162_rn(t.v[it].x, t.v[it].y);
        d[1] = __floats2bfloat162_rn(t.v[it].z, t.v[it].w);
    }
}

template <int HS>
static __device__ __forceinline__ void load_tile(bf16 *dst, const float *__restrict__ src,
                                                 size_t ld, int r0, int T)
{
    tile_regs<HS> t;
    tile_fetch<HS>(t, src, ld, r0, T);
    tile_put<HS>(dst, t);
}

/* this warp's 16 rows of out (16 x 64, fp32, ld LDS) = a (16 x HS rows of A) . b^T, b a
 * tile of 64 rows of HS: S = q k^T, dP = dout v^T and their transposes */
template <int HS>
static __device__ void mm_abt(float *out, const bf16 *a, const bf16 *b)
{
    constexpr int LDH = attn_dims<HS>::LDH, LDS = attn_dims<HS>::LDS;
    for (int n = 0; n < TILE / 16; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < HS; k += 16) {
            frag_a fa;
            frag_b_col fb;
            wmma::load_matrix_sync(fa, a + k, LDH);
            wmma::load_matrix_sync(fb, b + n * 16 * LDH + k, LDH);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + n * 16, acc, LDS, wmma::mem_row_major);
    }
}

/* this warp's 16 rows of out (16 x HS, fp32, ld LDO) = p (16 x 64 bf16, ld LDP) . b (a
 * tile of 64 rows of HS): P v, P^T dout, dS^T q, dS k */
template <int HS>
static __device__ void mm_pb(float *out, const bf16 *p, const bf16 *b)
{
    constexpr int LDH = attn_dims<HS>::LDH, LDP = attn_dims<HS>::LDP,
                  LDO = attn_dims<HS>::LDO;
    for (int n = 0; n < HS / 16; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < TILE; k += 16) {
            frag_a fa;
            frag_b_row fb;
            wmma::load_matrix_sync(fa, p + k, LDP);
            wmma::load_matrix_sync(fb, b + k * LDH + n * 16, LDH);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + n * 16, acc, LDO, wmma::mem_row_major);
    }
}

template <int HS>
static __global__ void __launch_bounds__(NTHR)
attn_fwd(float *out, float *lse, const float *qkv, int T, int C, int NH, float scale)
{
    typedef attn_dims<HS> D;
    extern __shared__ __align__(128) unsigned char sm[];
    bf16 *qs = (bf16 *)sm, *ks = (bf16 *)(sm + D::TILE_B), *vs = (bf16 *)(sm + 2 * D::TILE_B);
    bf16 *ps = (bf16 *)(sm + 3 * D::TILE_B);
    float *sf = (float *)(sm + 3 * D::TILE_B + D::P_B);
    float *of = (float *)(sm + 3 * D::TILE_B + D::P_B + D::S_B);

    int qt = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, q0 = qt * TILE;
    int warp = threadIdx.x / 32, r = threadIdx.x / 2, half = threadIdx.x % 2;
    int qi = q0 + r;
    size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * ld + h * HS;

    load_tile<HS>(qs, base, ld, q0, T);
    float acc[HS / 2];
    for (int j = 0; j < HS / 2; j++)
        acc[j] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    tile_regs<HS> kr, vr;
    if (tile_regs<HS>::PF) {
        tile_fetch<HS>(kr, base + C, ld, 0, T);
        tile_fetch<HS>(vr, base + 2 * C, ld, 0, T);
    }
    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * TILE;
        if (!tile_regs<HS>::PF) {
            tile_fetch<HS>(kr, base + C, ld, k0, T);
            tile_fetch<HS>(vr, base + 2 * C, ld, k0, T);
        }
        __syncthreads();   // every warp is done with the last k, v (and q is in)
        tile_put<HS>(ks, kr);
        tile_put<HS>(vs, vr);
        __syncthreads();
        if (tile_regs<HS>::PF && kt < qt) {   // the next tile, in flight meanwhile
            tile_fetch<HS>(kr, base + C, ld, k0 + TILE, T);
            tile_fetch<HS>(vr, base + 2 * C, ld, k0 + TILE, T);
        }
        mm_abt<HS>(sf + warp * 16 * D::LDS, qs + warp * 16 * D::LDH, ks);
        __syncwarp();
        const float *srow = sf + r * D::LDS + half * 32;
        float sv[32], mx = -INFINITY;
        for (int j = 0; j < 32; j++) {
            int key = k0 + half * 32 + j;
            sv[j] = key <= qi ? srow[j] * scale : -INFINITY;
            mx = fmaxf(mx, sv[j]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        float mn = fmaxf(m, mx);   // finite: key k0 <= qi in every tile visited
        float corr = __expf(m - mn), rs = 0.0f;
        bf16 *prow = ps + r * D::LDP + half * 32;
        for (int j = 0; j < 32; j++) {
            float p = __expf(sv[j] - mn);
            prow[j] = __float2bfloat16(p);
            rs += p;
        }
        rs += __shfl_xor_sync(FULL_MASK, rs, 1);
        l = l * corr + rs;
        m = mn;
        __syncwarp();
        mm_pb<HS>(of + warp * 16 * D::LDO, ps + warp * 16 * D::LDP, vs);
        __syncwarp();
        const float *orow = of + r * D::LDO + half * (HS / 2);
        for (int j = 0; j < HS / 2; j++)
            acc[j] = acc[j] * corr + orow[j];
        __syncwarp();
    }
    if (qi < T) {
        float inv = 1.0f / l;
        float *o = out + ((size_t)b * T + qi) * C + h * HS + half * (HS / 2);
        for (int j = 0; j < HS / 2; j++)
            o[j] = acc[j] * inv;
        if (half == 0)
            lse[(size_t)blockIdx.y * T + qi] = m + logf(l);
    }
}

/* dsum (B, NH, T) = rowsum(dout * out) per head: a warp per (b, t, h) */
static __global__ void attn_dsum(float *dsum, const float *dout, const float *out, int T,
                                 int C, int NH, int HS, size_t rows)
{
    size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (w >= rows)
        return;
    int h = (int)(w % NH);
    size_t bt = w / NH, b = bt / T, t = bt % T;
    const float *x = dout + bt * C + h * HS, *y = out + bt * C + h * HS;
    float s = 0.0f;
    for (int i = lane; i < HS; i += 32)
        s += x[i] * y[i];
    for (int o = 16; o > 0; o /= 2)
        s += __shfl_xor_sync(FULL_MASK, s, o);
    if (lane == 0)
        dsum[(b * NH + h) * T + t] = s;
}

/* dk, dv of a key tile: rows of the warps are keys; over the query tiles at or after it */
template <int HS>
static __global__ void __launch_bounds__(NTHR)
attn_bwd_kv(float *dqkv, const float *dout, const float *qkv, const float *lse,
            const float *dsum, int T, int C, int NH, float scale)
{
    typedef attn_dims<HS> D;
    extern __shared__ __align__(128) unsigned char sm[];
    bf16 *ks = (bf16 *)sm, *vs = (bf16 *)(sm + D::TILE_B), *qs = (bf16 *)(sm + 2 * D::TILE_B);
    bf16 *dos = (bf16 *)(sm + 3 * D::TILE_B);
    bf16 *pt = (bf16 *)(sm + 4 * D::TILE_B), *dst = (bf16 *)(sm + 4 * D::TILE_B + D::P_B);
    float *sf = (float *)(sm + 4 * D::TILE_B + 2 * D::P_B);
    float *of = (float *)(sm + 4 * D::TILE_B + 2 * D::P_B + D::S_B);
    float *lse_s = (float *)(sm + 4 * D::TILE_B + 2 * D::P_B + D::S_B + D::O_B);
    float *d_s = lse_s + TILE;

    int kt = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, k0 = kt * TILE;
    int warp = threadIdx.x / 32, r = threadIdx.x / 2, half = threadIdx.x % 2;
    int key = k0 + r, nqt = (T + TILE - 1) / TILE;
    size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * ld + h * HS;
    const float *dbase = dout + (size_t)b * T * C + h * HS;
    const float *lrow = lse + (size_t)blockIdx.y * T, *drow = dsum + (size_t)blockIdx.y * T;

    load_tile<HS>(ks, base + C, ld, k0, T);
    load_tile<HS>(vs, base + 2 * C, ld, k0, T);
    float dk[HS / 2], dv[HS / 2];
    for (int j = 0; j < HS / 2; j++)
        dk[j] = dv[j] = 0.0f;
    tile_regs<HS> qr, dr;
    if (tile_regs<HS>::PF) {
        tile_fetch<HS>(qr, base, ld, k0, T);
        tile_fetch<HS>(dr, dbase, C, k0, T);
    }
    for (int qt = kt; qt < nqt; qt++) {
        int q0 = qt * TILE;
        if (!tile_regs<HS>::PF) {
            tile_fetch<HS>(qr, base, ld, q0, T);
            tile_fetch<HS>(dr, dbase, C, q0, T);
        }
        __syncthreads();
        tile_put<HS>(qs, qr);
        tile_put<HS>(dos, dr);
        if (threadIdx.x < TILE) {
            int qi = q0 + threadIdx.x;
            lse_s[threadIdx.x] = qi < T ? lrow[qi] : INFINITY;   // P = 0 past T
            d_s[threadIdx.x] = qi < T ? drow[qi] : 0.0f;
        }
        __syncthreads();
        if (tile_regs<HS>::PF && qt + 1 < nqt) {
            tile_fetch<HS>(qr, base, ld, q0 + TILE, T);
            tile_fetch<HS>(dr, dbase, C, q0 + TILE, T);
        }
        // P^T (keys x queries)
        mm_abt<HS>(sf + warp * 16 * D::LDS, ks + warp * 16 * D::LDH, qs);
        __syncwarp();
        float pv[32];
        const float *srow = sf + r * D::LDS + half * 32;
        bf16 *prow = pt + r * D::LDP + half * 32;
        for (int j = 0; j < 32; j++) {
            int q = half * 32 + j;
            pv[j] = key <= q0 + q ? __expf(srow[j] * scale - lse_s[q]) : 0.0f;
            prow[j] = __float2bfloat16(pv[j]);
        }
        __syncwarp();
        // dP^T = v dout^T, then dS^T
        mm_abt<HS>(sf + warp * 16 * D::LDS, vs + warp * 16 * D::LDH, dos);
        __syncwarp();
        bf16 *dsrow = dst + r * D::LDP + half * 32;
        for (int j = 0; j < 32; j++) {
            int q = half * 32 + j;
            dsrow[j] = __float2bfloat16(pv[j] * (srow[j] - d_s[q]));
        }
        __syncwarp();
        const float *orow = of + r * D::LDO + half * (HS / 2);
        mm_pb<HS>(of + warp * 16 * D::LDO, pt + warp * 16 * D::LDP, dos);   // P^T dout
        __syncwarp();
        for (int j = 0; j < HS / 2; j++)
            dv[j] += orow[j];
        __syncwarp();
        mm_pb<HS>(of + warp * 16 * D::LDO, dst + warp * 16 * D::LDP, qs);   // dS^T q
        __syncwarp();
        for (int j = 0; j < HS / 2; j++)
            dk[j] += orow[j];
        __syncwarp();
    }
    if (key < T) {
        float *o = dqkv + ((size_t)b * T + key) * ld + h * HS + half * (HS / 2);
        for (int j = 0; j < HS / 2; j++) {
            o[C + j] = dk[j] * scale;
            o[2 * C + j] = dv[j];
        }
    }
}

/* dq of a query tile: over the key tiles at or before it */
template <int HS>
static __global__ void __launch_bounds__(NTHR)
attn_bwd_q(float *dqkv, const float *dout, const float *qkv, const float *lse,
           const float *dsum, int T, int C, int NH, float scale)
{
    typedef attn_dims<HS> D;
    extern __shared__ __align__(128) unsigned char sm[];
    bf16 *qs = (bf16 *)sm, *dos = (bf16 *)(sm + D::TILE_B), *ks = (bf16 *)(sm + 2 * D::TILE_B);
    bf16 *vs = (bf16 *)(sm + 3 * D::TILE_B), *dss = (bf16 *)(sm + 4 * D::TILE_B);
    float *sf = (float *)(sm + 4 * D::TILE_B + D::P_B);
    float *of = (float *)(sm + 4 * D::TILE_B + D::P_B + D::S_B);

    int qt = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, q0 = qt * TILE;
    int warp = threadIdx.x / 32, r = threadIdx.x / 2, half = threadIdx.x % 2;
    int qi = q0 + r;
    size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * ld + h * HS;
    float lq = qi < T ? lse[(size_t)blockIdx.y * T + qi] : INFINITY;
    float dq_d = qi < T ? dsum[(size_t)blockIdx.y * T + qi] : 0.0f;

    load_tile<HS>(qs, base, ld, q0, T);
    load_tile<HS>(dos, dout + (size_t)b * T * C + h * HS, C, q0, T);
    float dq[HS / 2];
    for (int j = 0; j < HS / 2; j++)
        dq[j] = 0.0f;
    tile_regs<HS> kr, vr;
    if (tile_regs<HS>::PF) {
        tile_fetch<HS>(kr, base + C, ld, 0, T);
        tile_fetch<HS>(vr, base + 2 * C, ld, 0, T);
    }
    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * TILE;
        if (!tile_regs<HS>::PF) {
            tile_fetch<HS>(kr, base + C, ld, k0, T);
            tile_fetch<HS>(vr, base + 2 * C, ld, k0, T);
        }
        __syncthreads();
        tile_put<HS>(ks, kr);
        tile_put<HS>(vs, vr);
        __syncthreads();
        if (tile_regs<HS>::PF && kt < qt) {
            tile_fetch<HS>(kr, base + C, ld, k0 + TILE, T);
            tile_fetch<HS>(vr, base + 2 * C, ld, k0 + TILE, T);
        }
        mm_abt<HS>(sf + warp * 16 * D::LDS, qs + warp * 16 * D::LDH, ks);   // S
        __syncwarp();
        float pv[32];
        const float *srow = sf + r * D::LDS + half * 32;
        for (int j = 0; j < 32; j++)
            pv[j] = k0 + half * 32 + j <= qi ? __expf(srow[j] * scale - lq) : 0.0f;
        __syncwarp();
        mm_abt<HS>(sf + warp * 16 * D::LDS, dos + warp * 16 * D::LDH, vs);  // dP
        __syncwarp();
        bf16 *dsrow = dss + r * D::LDP + half * 32;
        for (int j = 0; j < 32; j++)
            dsrow[j] = __float2bfloat16(pv[j] * (srow[j] - dq_d));
        __syncwarp();
        mm_pb<HS>(of + warp * 16 * D::LDO, dss + warp * 16 * D::LDP, ks);   // dS k
        __syncwarp();
        const float *orow = of + r * D::LDO + half * (HS / 2);
        for (int j = 0; j < HS / 2; j++)
            dq[j] += orow[j];
        __syncwarp();
    }
    if (qi < T) {
        float *o = dqkv + ((size_t)b * T + qi) * ld + h * HS + half * (HS / 2);
        for (int j = 0; j < HS / 2; j++)
            o[j] = dq[j] * scale;
    }
}

template <int HS> static size_t fwd_smem(void)
{
    typedef attn_dims<HS> D;
    return 3 * D::TILE_B + D::P_B + D::S_B + D::O_B;
}

template <int HS> static size_t kv_smem(void)
{
    typedef attn_dims<HS> D;
    return 4 * D::TILE_B + 2 * D::P_B + D::S_B + D::O_B + 2 * TILE * sizeof(float);
}

template <int HS> static size_t q_smem(void)
{
    typedef attn_dims<HS> D;
    return 4 * D::TILE_B + D::P_B + D::S_B + D::O_B;
}

/* each kernel's dynamic shared memory limit raised once (a device-wide attribute) */
template <int HS> static void raise_limits(void)
{
    static bool done;
    if (done)
        return;
    cudaFuncSetAttribute(attn_fwd<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)fwd_smem<HS>());
    cudaFuncSetAttribute(attn_bwd_kv<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)kv_smem<HS>());
    cudaFuncSetAttribute(attn_bwd_q<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)q_smem<HS>());
    done = true;
}

template <int HS>
static void fwd_launch(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                       cudaStream_t s)
{
    raise_limits<HS>();
    dim3 grid((T + TILE - 1) / TILE, B * NH);
    attn_fwd<HS><<<grid, NTHR, fwd_smem<HS>(), s>>>(out, lse, qkv, T, C, NH,
                                                    1.0f / sqrtf((float)HS));
}

template <int HS>
static void bwd_launch(float *dqkv, const float *dout, const float *qkv, const float *lse,
                       const float *dsum, int B, int T, int C, int NH, cudaStream_t s)
{
    raise_limits<HS>();
    dim3 grid((T + TILE - 1) / TILE, B * NH);
    float scale = 1.0f / sqrtf((float)HS);
    attn_bwd_kv<HS><<<grid, NTHR, kv_smem<HS>(), s>>>(dqkv, dout, qkv, lse, dsum, T, C, NH,
                                                      scale);
    attn_bwd_q<HS><<<grid, NTHR, q_smem<HS>(), s>>>(dqkv, dout, qkv, lse, dsum, T, C, NH,
                                                    scale);
}

extern "C" int kcu_attention_fits(int C, int NH)
{
    if (NH <= 0 || C % NH)
        return 0;
    int hs = C / NH;
    return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

extern "C" void kcu_attention_forward(float *out, float *lse, const float *qkv, int B, int T,
                                      int C, int NH, cudaStream_t s)
{
    switch (C / NH) {
    case 16: fwd_launch<16>(out, lse, qkv, B, T, C, NH, s); break;
    case 32: fwd_launch<32>(out, lse, qkv, B, T, C, NH, s); break;
    case 64: fwd_launch<64>(out, lse, qkv, B, T, C, NH, s); break;
    case 128: fwd_launch<128>(out, lse, qkv, B, T, C, NH, s); break;
    default: break;   // the caller checked kcu_attention_fits
    }
}

extern "C" void kcu_attention_backward(float *dqkv, float *dsum, const float *dout,
                                       const float *qkv, const float *out, const float *lse,
                                       int B, int T, int C, int NH, cudaStream_t s)
{
    int HS = C / NH;
    size_t rows = (size_t)B * T * NH;
    attn_dsum<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, s>>>(dsum, dout, out, T, C, NH,
                                                                  HS, rows);
    switch (HS) {
    case 16: bwd_launch<16>(dqkv, dout, qkv, lse, dsum, B, T, C, NH, s); break;
    case 32: bwd_launch<32>(dqkv, dout, qkv, lse, dsum, B, T, C, NH, s); break;
    case 64: bwd_launch<64>(dqkv, dout, qkv, lse, dsum, B, T, C, NH, s); break;
    case 128: bwd_launch<128>(dqkv, dout, qkv, lse, dsum, B, T, C, NH, s); break;
    default: break;
    }
}
