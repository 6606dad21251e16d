/*
 * nn_cuda.cu - weft-train's model kernels on an NVIDIA GPU (declared in nn_cuda.h).
 *
 * Each kernel computes the function of its CPU twin in kernels/nn/ (the reference): row
 * reductions (layernorm, softmax, cross-entropy) give one warp or one block a row and
 * reduce with warp shuffles; element-wise ops are grid-stride loops. Parameter gradients
 * of per-row ops (layernorm weight/bias, bias columns) are column sums in a fixed order:
 * per block of rows into the caller's scratch, then the blocks' sums in order (col_sums),
 * so they come out the same bits every run; the encoder's dwte takes each token's rows
 * in position order from a token index the host builds (no atomics anywhere in a step).
 * fp32 throughout, but for the bf16 outputs of layernorm and GELU (the _bf16 launchers)
 * and the conversions: the rest of --dtype bf16 lives in the cuBLAS calls and the fused
 * attention (trainer/gpt2_cuda.c, attn_cuda.cu).
 *
 * Invariants: no kernel allocates; every launcher only queues work on its stream; shapes
 * are the callers' (validated on the host before any launch).
 */
#include <cuda_runtime.h>
#include <math.h>

#include "nn_cuda.h"

#define WARP 32
#define FULL_MASK 0xffffffffu

static __device__ __forceinline__ float warp_sum(float x)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        x += __shfl_xor_sync(FULL_MASK, x, o);
    return x;
}

static __device__ __forceinline__ float warp_max(float x)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, o));
    return x;
}

/* sum (or max) over a block of blockDim.x threads (a multiple of 32, <= 1024); every
 * thread gets the result. sh: 32 floats of shared memory. */
static __device__ float block_reduce(float x, float *sh, int is_max)
{
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    x = is_max ? warp_max(x) : warp_sum(x);
    __syncthreads();   // sh may still be read by a previous reduction
    if (lane == 0)
        sh[w] = x;
    __syncthreads();
    x = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    return is_max ? warp_max(x) : warp_sum(x);
}

/* kern_to_bf16's rounding (nearest even; NaN stays NaN, quieted) */
static __device__ __forceinline__ uint16_t to_bf16_rne(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)   // NaN: stays NaN, quieted
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static __device__ __forceinline__ float from_bf16(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

/* an output element as fp32, or rounded to bf16 */
static __device__ __forceinline__ void put(float *o, size_t i, float x)
{
    o[i] = x;
}

static __device__ __forceinline__ void put(uint16_t *o, size_t i, float x)
{
    o[i] = to_bf16_rne(x);
}

static unsigned grid_for(size_t n, int threads)
{
    size_t g = (n + threads - 1) / threads;
    return (unsigned)(g > 65535u * 16 ? 65535u * 16 : (g ? g : 1));
}

/* ---- encoder ---- */

static __global__ void encoder_fwd(float *out, const int *inp, const float *wte,
                                   const float *wpe, int T, int C, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t bt = i / C;
        int c = (int)(i % C), t = (int)(bt % T);
        out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
    }
}

/* dwte rows of the tokens present: a block per token, its positions in ascending order */
static __global__ void encoder_bwd_wte(float *dwte, const float *dout, const int *csr, int BT,
                                       int C)
{
    const int *order = csr, *starts = csr + BT, *toks = csr + 2 * (size_t)BT + 1;
    int u = blockIdx.x, s0 = starts[u], s1 = starts[u + 1];
    float *row = dwte + (size_t)toks[u] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int k = s0; k < s1; k++)
            acc += dout[(size_t)order[k] * C + c];
        row[c] += acc;
    }
}

/* dwpe (T, C): each element sums its B rows in order */
static __global__ void encoder_bwd_wpe(float *dwpe, const float *dout, int B, size_t TC)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < TC;
         i += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int b = 0; b < B; b++)
            acc += dout[b * TC + i];
        dwpe[i] += acc;
    }
}

extern "C" void kcu_encoder_forward(float *out, const int *inp, const float *wte,
                                    const float *wpe, int B, int T, int C, cudaStream_t s)
{
    size_t n = (size_t)B * T * C;
    encoder_fwd<<<grid_for(n, 256), 256, 0, s>>>(out, inp, wte, wpe, T, C, n);
}

extern "C" void kcu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                     const int *tokens, int ntok, int B, int T, int C,
                                     cudaStream_t s)
{
    size_t tc = (size_t)T * C;
    if (ntok > 0)
        encoder_bwd_wte<<<ntok, 256, 0, s>>>(dwte, dout, tokens, B * T, C);
    encoder_bwd_wpe<<<grid_for(tc, 256), 256, 0, s>>>(dwpe, dout, B, tc);
}

/* ---- layernorm: a warp per row, two passes as the CPU (mean, then centred variance) */

template <typename OutT>
static __global__ void layernorm_fwd(OutT *out, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, int N, int C)
{
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C;
    float m = 0.0f;
    for (int c = lane; c < C; c += WARP)
        m += x[c];
    m = warp_sum(m) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float d = x[c] - m;
        var += d * d;
    }
    var = warp_sum(var) / C;
    float s = 1.0f / sqrtf(var + 1e-5f);
    OutT *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += WARP)
        put(o, c, (x[c] - m) * s * w[c] + b[c]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

/* dinp of layernorm: a warp per row (the row's two sums, then its gradient) */
static __global__ void layernorm_bwd(float *dinp, const float *dout, const float *inp,
                                     const float *w, const float *mean, const float *rstd,
                                     int N, int C)
{
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row], a = 0.0f, bb = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float norm = (x[c] - m) * s, dn = w[c] * dy[c];
        a += dn;
        bb += dn * norm;
    }
    a = warp_sum(a) / C;
    bb = warp_sum(bb) / C;
    for (int c = lane; c < C; c += WARP) {
        float norm = (x[c] - m) * s, dn = w[c] * dy[c];
        dx[c] += (dn - a - norm * bb) * s;
    }
}

/* Column sums in a fixed order, for the parameter gradients of per-row ops: blockDim (32,
 * 8), a column per threadIdx.x; block row blockIdx.y takes rows blockIdx.y*8 + threadIdx.y,
 * + gridDim.y*8, ...; its 8 partial sums are added in order and written to part[blockIdx.y]
 * (row stride `stride`), and col_sums_add adds the gridDim.y partials in order. With
 * norm (layernorm): part holds sum(norm * dout) in [0, C) and sum(dout) in [C, 2C). */
static __global__ void col_sums(float *part, size_t stride, const float *dout, int N, int C,
                                const float *inp, const float *mean, const float *rstd)
{
    __shared__ float sw[8][WARP + 1], sb[8][WARP + 1];
    int c = blockIdx.x * WARP + threadIdx.x;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (int r = blockIdx.y * 8 + threadIdx.y; r < N; r += gridDim.y * 8) {
            float dy = dout[(size_t)r * C + c];
            ab += dy;
            if (inp)
                aw += (inp[(size_t)r * C + c] - mean[r]) * rstd[r] * dy;
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int y = 1; y < 8; y++) {
            aw += sw[y][threadIdx.x];
            ab += sb[y][threadIdx.x];
        }
        float *p = part + blockIdx.y * stride;
        if (inp) {
            p[c] = aw;
            p[C + c] = ab;
        } else {
            p[c] = ab;
        }
    }
}

/* y[c] += part[0][c] + part[1][c] + ... (G rows of stride floats), in that order */
static __global__ void col_sums_add(float *y, const float *part, int G, size_t stride, int n)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n)
        return;
    float s = 0.0f;
    for (int g = 0; g < G; g++)
        s += part[g * stride + c];
    y[c] += s;
}

/* block rows of col_sums: enough blocks to fill the GPU, at most 32, each partial row of
 * `width` floats fitting the scratch, at least one (the callers' scratch holds one) */
static int col_groups(int N, size_t width, size_t scratch_floats)
{
    int g = (int)(scratch_floats / width), want = (int)((N + 7) / 8);
    if (g > 32)
        g = 32;
    if (g > want)
        g = want;
    return g < 1 ? 1 : g;
}

extern "C" void kcu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int N, int C,
                                      cudaStream_t s)
{
    int rows_per_block = 8;
    layernorm_fwd<<<(N + rows_per_block - 1) / rows_per_block, rows_per_block * WARP, 0, s>>>(
        out, mean, rstd, inp, weight, bias, N, C);
}

extern "C" void kcu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd,
                                           const float *inp, const float *weight,
                                           const float *bias, int N, int C, cudaStream_t s)
{
    int rows_per_block = 8;
    layernorm_fwd<<<(N + rows_per_block - 1) / rows_per_block, rows_per_block * WARP, 0, s>>>(
        out, mean, rstd, inp, weight, bias, N, C);
}

extern "C" void kcu_layernorm_backward(float *dinp, float *dweight, float *dbias,
                                       const float *dout, const float *inp,
                                       const float *weight, const float *mean,
                                       const float *rstd, int N, int C, float *scratch,
                                       size_t scratch_floats, cudaStream_t s)
{
    int rows_per_block = 8;
    layernorm_bwd<<<(N + rows_per_block - 1) / rows_per_block, rows_per_block * WARP, 0, s>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    int G = col_groups(N, 2 * (size_t)C, scratch_floats);
    col_sums<<<dim3((C + WARP - 1) / WARP, G), dim3(WARP, 8), 0, s>>>(
        scratch, 2 * (size_t)C, dout, N, C, inp, mean, rstd);
    col_sums_add<<<(C + 255) / 256, 256, 0, s>>>(dweight, scratch, G, 2 * (size_t)C, C);
    col_sums_add<<<(C + 255) / 256, 256, 0, s>>>(dbias, scratch + C, G, 2 * (size_t)C, C);
}

/* ---- bias ---- */

static __global__ void add_bias(float *out, const float *bias, int OC, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

extern "C" void kcu_add_bias(float *out, const float *bias, int N, int OC, cudaStream_t s)
{
    size_t n = (size_t)N * OC;
    add_bias<<<grid_for(n, 256), 256, 0, s>>>(out, bias, OC, n);
}

extern "C" void kcu_bias_backward(float *dbias, const float *dout, int N, int OC,
                                  float *scratch, size_t scratch_floats, cudaStream_t s)
{
    int G = col_groups(N, (size_t)OC, scratch_floats);
    col_sums<<<dim3((OC + WARP - 1) / WARP, G), dim3(WARP, 8), 0, s>>>(
        scratch, (size_t)OC, dout, N, OC, NULL, NULL, NULL);
    col_sums_add<<<(OC + 255) / 256, 256, 0, s>>>(dbias, scratch, G, (size_t)OC, OC);
}

/* ---- GELU (tanh approximation) and the residual ---- */

#define GELU_S 0.7978845608028654f

template <typename OutT>
static __global__ void gelu_fwd(OutT *out, const float *inp, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        put(out, i, 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x))));
    }
}

static __global__ void gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float u = GELU_S * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) +
                  0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = g * dout[i];
    }
}

static __global__ void residual_fwd(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

extern "C" void kcu_gelu_forward(float *out, const float *inp, size_t n, cudaStream_t s)
{
    gelu_fwd<<<grid_for(n, 256), 256, 0, s>>>(out, inp, n);
}

extern "C" void kcu_gelu_forward_bf16(uint16_t *out, const float *inp, size_t n,
                                      cudaStream_t s)
{
    gelu_fwd<<<grid_for(n, 256), 256, 0, s>>>(out, inp, n);
}

extern "C" void kcu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                                  cudaStream_t s)
{
    gelu_bwd<<<grid_for(n, 256), 256, 0, s>>>(dinp, inp, dout, n);
}

extern "C" void kcu_residual_forward(float *out, const float *a, const float *b, size_t n,
                                     cudaStream_t s)
{
    residual_fwd<<<grid_for(n, 256), 256, 0, s>>>(out, a, b, n);
}

/* ---- attention layouts: (B, T, 3C) <-> (B, NH, T, hs) ---- */

/* Element i of the head-major layout (B, NH, T, hs) is channel h*hs + d of row (b, t):
 * its offset in a row-major (B, T, row) buffer whose rows are `row` floats long. */
static __device__ __forceinline__ size_t head_to_row(size_t i, int T, int C, int NH, size_t row)
{
    int hs = C / NH, d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T);
    r /= T;
    int h = (int)(r % NH);
    return (r / NH * T + t) * row + (size_t)h * hs + d;
}

/* i walks the head-major q, k, v; merge = 1 goes the other way (into qkv) */
static __global__ void qkv_split(float *q, float *k, float *v, const float *qkv, int T,
                                 int C, int NH, size_t n, int merge)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t src = head_to_row(i, T, C, NH, 3 * (size_t)C);
        if (merge) {
            ((float *)qkv)[src] = q[i];
            ((float *)qkv)[src + C] = k[i];
            ((float *)qkv)[src + 2 * C] = v[i];
        } else {
            q[i] = qkv[src];
            k[i] = qkv[src + C];
            v[i] = qkv[src + 2 * C];
        }
    }
}

static __global__ void heads_permute(float *dst, const float *src, int T, int C, int NH,
                                     size_t n, int to_btc)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = head_to_row(i, T, C, NH, C);
        if (to_btc)
            dst[j] = src[i];
        else
            dst[i] = src[j];
    }
}

extern "C" void kcu_qkv_split(float *q, float *k, float *v, const float *qkv, int B, int T,
                              int C, int NH, cudaStream_t s)
{
    size_t n = (size_t)B * T * C;
    qkv_split<<<grid_for(n, 256), 256, 0, s>>>(q, k, v, qkv, T, C, NH, n, 0);
}

extern "C" void kcu_qkv_merge(float *dqkv, const float *dq, const float *dk, const float *dv,
                              int B, int T, int C, int NH, cudaStream_t s)
{
    size_t n = (size_t)B * T * C;
    qkv_split<<<grid_for(n, 256), 256, 0, s>>>((float *)dq, (float *)dk, (float *)dv, dqkv,
                                                T, C, NH, n, 1);
}

extern "C" void kcu_heads_permute(float *dst, const float *src, int B, int T, int C, int NH,
                                  int to_btc, cudaStream_t s)
{
    size_t n = (size_t)B * T * C;
    heads_permute<<<grid_for(n, 256), 256, 0, s>>>(dst, src, T, C, NH, n, to_btc);
}

/* ---- causal softmax: a warp per row of T (row index i = row % T is the query) ---- */

static __global__ void softmax_causal(float *att, float scale, int rows, int T)
{
    size_t row = blockIdx.x * (size_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= (size_t)rows * T)
        return;
    int i = (int)(row % T);
    float *a = att + row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += WARP)
        mx = fmaxf(mx, a[j] * scale);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += WARP) {
        float e = expf(a[j] * scale - mx);
        a[j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < T; j += WARP)
        a[j] = j <= i ? a[j] * inv : 0.0f;
}

static __global__ void softmax_causal_bwd(float *datt, const float *att, float scale,
                                          int rows, int T)
{
    size_t row = blockIdx.x * (size_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= (size_t)rows * T)
        return;
    int i = (int)(row % T);
    float *d = datt + row * T;
    const float *p = att + row * T;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += WARP)
        dot += p[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += WARP)
        d[j] = j <= i ? p[j] * (d[j] - dot) * scale : 0.0f;
}

extern "C" void kcu_softmax_causal(float *att, float scale, int rows, int T, cudaStream_t s)
{
    size_t n = (size_t)rows * T;
    softmax_causal<<<(unsigned)((n + 7) / 8), 8 * WARP, 0, s>>>(att, scale, rows, T);
}

extern "C" void kcu_softmax_causal_backward(float *datt, const float *att, float scale,
                                            int rows, int T, cudaStream_t s)
{
    size_t n = (size_t)rows * T;
    softmax_causal_bwd<<<(unsigned)((n + 7) / 8), 8 * WARP, 0, s>>>(datt, att, scale, rows,
                                                                    T);
}

/* ---- fused softmax + cross-entropy of the head: a block per row of V ---- */

static __global__ void xent_fwd(float *losses, float *lse, const float *logits,
                                const int *targets, int V, int ld)
{
    __shared__ float sh[WARP];
    const float *x = logits + (size_t)blockIdx.x * ld;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, x[j]);
    mx = block_reduce(mx, sh, 1);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        sum += expf(x[j] - mx);
    sum = block_reduce(sum, sh, 0);
    if (threadIdx.x == 0) {
        float l = mx + logf(sum);
        lse[blockIdx.x] = l;
        losses[blockIdx.x] = l - x[targets[blockIdx.x]];
    }
}

static __global__ void xent_bwd(float *dlogits, const float *logits, const float *lse,
                                const int *targets, float dloss, int V, int ld)
{
    size_t base = (size_t)blockIdx.x * ld;
    float l = lse[blockIdx.x];
    int tgt = targets[blockIdx.x];
    for (int j = threadIdx.x; j < ld; j += blockDim.x) {
        float p = j < V ? expf(logits[base + j] - l) : 0.0f;
        dlogits[base + j] = j < V ? (p - (j == tgt ? 1.0f : 0.0f)) * dloss : 0.0f;
    }
}

extern "C" void kcu_crossentropy_forward(float *losses, float *lse, const float *logits,
                                         const int *targets, int N, int V, int ld,
                                         cudaStream_t s)
{
    xent_fwd<<<N, 512, 0, s>>>(losses, lse, logits, targets, V, ld);
}

extern "C" void kcu_crossentropy_backward(float *dlogits, const float *logits,
                                          const float *lse, const int *targets, float dloss,
                                          int N, int V, int ld, cudaStream_t s)
{
    xent_bwd<<<N, 512, 0, s>>>(dlogits, logits, lse, targets, dloss, V, ld);
}

/* ---- the optimizer and the gradient norm ---- */

static __global__ void adamw(float *p, float *m, float *v, const float *g, size_t n,
                             float lr, float b1, float b2, float eps, float wd, float bc1,
                             float bc2_sqrt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i] * (1.0f - lr * wd);
        p[i] = pi - (lr / bc1) * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

extern "C" void kcu_adamw(float *params, float *m, float *v, const float *grads, size_t n,
                          float lr, float beta1, float beta2, float eps, float wd, int t,
                          cudaStream_t s)
{
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    adamw<<<grid_for(n, 256), 256, 0, s>>>(params, m, v, grads, n, lr, beta1, beta2, eps, wd,
                                           bc1, sqrtf(bc2));
}

static __global__ void sumsq(double *part, const float *x, size_t n)
{
    __shared__ float sh[WARP];
    float acc = 0.0f;   // per thread a few thousand terms at most: float is enough here
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        acc += x[i] * x[i];
    acc = block_reduce(acc, sh, 0);
    if (threadIdx.x == 0)
        part[blockIdx.x] = acc;
}

/* *out += the G partial sums, in a fixed order (a strided pass, then a fixed tree) */
static __global__ void sumsq_add(double *out, const double *part, int G)
{
    __shared__ double sh[256];
    double acc = 0.0;
    for (int i = threadIdx.x; i < G; i += blockDim.x)
        acc += part[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *out += sh[0];
}

static __global__ void scale(float *x, float c, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= c;
}

static __global__ void sum_kernel(float *out, const float *x, int n)
{
    __shared__ float sh[WARP];
    double acc = 0.0;   // one block: n is a batch's B*T losses
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        acc += x[i];
    float r = block_reduce((float)acc, sh, 0);
    if (threadIdx.x == 0)
        *out = r;
}

extern "C" void kcu_sumsq(double *out, const float *x, size_t n, double *scratch,
                          size_t scratch_doubles, cudaStream_t s)
{
    size_t g = (n + 256 * 64 - 1) / (256 * 64);   // ~64 elements per thread
    g = g > 8192 ? 8192 : g;
    g = g > scratch_doubles ? scratch_doubles : g;
    g = g ? g : 1;
    sumsq<<<(unsigned)g, 256, 0, s>>>(scratch, x, n);
    sumsq_add<<<1, 256, 0, s>>>(out, scratch, (int)g);
}

extern "C" void kcu_scale(float *x, float a, size_t n, cudaStream_t s)
{
    scale<<<grid_for(n, 256), 256, 0, s>>>(x, a, n);
}

extern "C" void kcu_sum(float *out, const float *x, int n, cudaStream_t s)
{
    sum_kernel<<<1, 1024, 0, s>>>(out, x, n);
}

/* ---- shard/'s conversions and sums ---- */


static __global__ void to_bf16_kernel(uint16_t *out, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = to_bf16_rne(x[i]);
}

static __global__ void from_bf16_kernel(float *out, const uint16_t *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_bf16(x[i]);
}

static __global__ void add_kernel(float *y, const void *x, size_t n, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bf16 ? from_bf16(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

extern "C" void kcu_to_bf16(uint16_t *out, const float *x, size_t n, cudaStream_t s)
{
    to_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(out, x, n);
}

extern "C" void kcu_from_bf16(float *out, const uint16_t *x, size_t n, cudaStream_t s)
{
    from_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(out, x, n);
}

extern "C" void kcu_add(float *y, const void *x, size_t n, int bf16, cudaStream_t s)
{
    add_kernel<<<grid_for(n, 256), 256, 0, s>>>(y, x, n, bf16);
}
