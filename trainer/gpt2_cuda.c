/*
 * gpt2_cuda.c - GPT-2 forward, backward and AdamW on an NVIDIA GPU (gpt2_cuda.h).
 *
 * The step is gpt2.c's, op for op, with kernels/nn/cuda/ for everything but the matmuls
 * and cuBLAS for those (and for attention's two batched products per direction: S = q k^T
 * into the layer's att, softmax in place, y = P v; backward dP = dy v^T, dv = P^T dy,
 * dS in place, dq = dS k, dk = dS^T q); with --dtype bf16 and heads of 16-128 channels
 * attention is kcu_attention_* instead (no (T, T) matrix; WEFT_TRAIN_ATTN chooses:
 * train_cuda_attention). All work is queued on one stream; the host waits
 * only where it needs a number (the loss, the gradient norm) or a copy. The tied wte
 * gradient gets the head's and the encoder's contributions, as on the CPU; the padded
 * rows [V, Vp) get none.
 *
 * Row-major operands through column-major cuBLAS: a row-major (R, K) matrix is a
 * column-major (K, R) one, so out (N, OC) = inp (N, C) . W (OC, C)^T is
 * gemm(T, N, OC, N, C, W, inp) and the backward products follow the same way.
 *
 * Invariants: g->params/grads/m/v are single contiguous device buffers in the block-major
 * unit layout (train_unit_off); nothing here exits or prints; every failure returns a
 * status with the CUDA or cuBLAS reason and leaves the host model untouched.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpt2_cuda.h"
#include "status.h"
#include "train_int.h"

/* regions start on 16-float (64-byte) boundaries, as the CPU split's */
static size_t align16(size_t n)
{
    return (n + 15) / 16 * 16;
}

size_t train_cuda_extra_floats(const train_gpt2_cfg_t *c, int B, int T)
{
    size_t BT = (size_t)B * T;
    return 7 * align16(BT * c->channels) + align16((size_t)B * c->num_heads * T * T);
}

size_t train_cuda_bytes(const train_gpt2_cfg_t *c, int B, int T)
{
    size_t sizes[TRAIN_NUM_PARAM_TENSORS], nacts, nscratch;
    size_t np = train_param_sizes(sizes, c);
    train_gpt2_act_split(c, B, T, &nacts, &nscratch);
    size_t floats = 4 * np + nacts + nscratch + train_cuda_extra_floats(c, B, T);
    // + inputs, targets and the token index (kcu_encoder_backward): 5 B*T + 1 ints
    return floats * sizeof(float) + (5 * (size_t)B * T + 1) * sizeof(int) + 64;
}

#ifndef WEFT_TRAIN_CUDA

int train_cuda_built(void)
{
    return 0;
}

static weft_status_t not_built(void)
{
    return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "--device cuda: this weft-train was built "
                            "without CUDA (build with nvcc at /usr/local/cuda/bin, not "
                            "make CUDA=0)");
}

weft_status_t train_cuda_probe(const char **name_p)
{
    return not_built();
}

weft_status_t train_cuda_attention(const train_gpt2_cfg_t *c, int bf16, int *flash)
{
    *flash = 0;
    return not_built();
}

weft_status_t train_cuda_attention_run(const float *qkv, const float *dout, float *out,
                                       float *dqkv, int B, int T, int C, int NH)
{
    return not_built();
}

weft_status_t train_cuda_create(train_cuda_t **g_p, const train_gpt2_t *m, int B, int T,
                                int bf16)
{
    *g_p = NULL;
    return not_built();
}

weft_status_t train_cuda_create_sharded(train_cuda_t **g_p, const train_gpt2_t *m, int B,
                                        int T, int bf16, int local_rank)
{
    *g_p = NULL;
    return not_built();
}

void train_cuda_set_hooks(train_cuda_t *g, const train_hooks_t *hooks)
{
}

const shard_mem_t *train_cuda_shard_mem(train_cuda_t *g)
{
    return NULL;
}

void train_cuda_destroy(train_cuda_t *g)
{
}

weft_status_t train_cuda_forward(train_cuda_t *g, const int *inputs, const int *targets,
                                 int B, int T, float *loss_p)
{
    return not_built();
}

weft_status_t train_cuda_zero_grad(train_cuda_t *g)
{
    return not_built();
}

weft_status_t train_cuda_backward(train_cuda_t *g, float loss_scale)
{
    return not_built();
}

weft_status_t train_cuda_clip_grad(train_cuda_t *g, float clip, float *norm_p)
{
    return not_built();
}

weft_status_t train_cuda_update(train_cuda_t *g, float lr, float beta1, float beta2,
                                float eps, float wd, int t)
{
    return not_built();
}

weft_status_t train_cuda_download(train_cuda_t *g, train_gpt2_t *m, int grads)
{
    return not_built();
}

weft_status_t train_cuda_sync(train_cuda_t *g)
{
    return not_built();
}

#else

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>

#include "nn_cuda.h"
#include "weft_cuda.h"

/* cuBLAS is loaded when the first device model is created, not linked: mapping it (and
 * cuBLASLt, half a gigabyte) at start-up cost every weft-train run ~200 MB of resident
 * memory, --device cpu included. Symbols a program already has (linked in) win over the
 * library's; else libcublas.so.<major> from the CUDA tree the build used, then the
 * loader's search path. */
#define STR2(x) #x
#define STR(x) STR2(x)
#ifndef WEFT_CUDA_LIBDIR
#define WEFT_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    const char *(*status_string)(cublasStatus_t);
    cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                           int, const void *, const void *, cudaDataType, int, const void *,
                           cudaDataType, int, const void *, void *, cudaDataType, int,
                           cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*gemm_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                   int, int, const void *, const void *, cudaDataType, int,
                                   long long, const void *, cudaDataType, int, long long,
                                   const void *, void *, cudaDataType, int, long long, int,
                                   cublasComputeType_t, cublasGemmAlgo_t);
} cublas;
static pthread_once_t cublas_once = PTHREAD_ONCE_INIT;
static char cublas_why[512];   // empty once every symbol is resolved

static void cublas_load(void)
{
    static const char *const names[] = {
        "cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
        "cublasGetStatusString", "cublasGemmEx", "cublasGemmStridedBatchedEx",
    };
    void **slots[] = {
        (void **)&cublas.create, (void **)&cublas.destroy, (void **)&cublas.set_stream,
        (void **)&cublas.set_math_mode, (void **)&cublas.status_string, (void **)&cublas.gemm,
        (void **)&cublas.gemm_batched,
    };
    void *lib = NULL;
    if (!dlsym(RTLD_DEFAULT, names[0])) {
        lib = dlopen(WEFT_CUDA_LIBDIR "/" CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            lib = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(cublas_why, sizeof(cublas_why), "cannot load %s: %s", CUBLAS_SONAME,
                     dlerror());
            return;
        }
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *slots[i] = dlsym(lib ? lib : RTLD_DEFAULT, names[i]);
        if (!*slots[i]) {
            snprintf(cublas_why, sizeof(cublas_why), "%s has no %s", CUBLAS_SONAME, names[i]);
            return;
        }
    }
}

static weft_status_t cublas_ready(void)
{
    pthread_once(&cublas_once, cublas_load);
    if (cublas_why[0])
        return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "--device cuda: %s", cublas_why);
    return WEFT_OK;
}

struct train_cuda {
    train_gpt2_cfg_t cfg;
    size_t num_params;
    int B, T, bf16;
    int flash;                  // attention by kcu_attention_* (train_cuda_attention)
    int act16;                  // ln1, ln2, lnf, fch_gelu written as bf16 (act16_fits)
    cudaStream_t s;
    cublasHandle_t blas;
    float *params, *grads, *m, *v;    // (num_params) each, block-major
    float *acts_mem, *scratch_mem;    // train_gpt2_act_split's regions
    train_acts_t acts;
    train_scratch_t scratch;
    float *q, *k, *v_, *dq, *dk, *dv, *yh, *dP;   // attention scratch (extra_floats)
    int *inputs, *targets;            // (B, T) on the device
    int *tokens, ntok;                // the inputs' token index (tokens_index), 3BT+1 ints
    int *h_index, *h_count;           // host: the index as built, counts per token (V+1)
    float *loss_sum;                  // (1)
    double *sumsq;                    // (1)
    int last_B, last_T, have_targets, have_moments;
    // sharded (train_cuda_create_sharded): the state is shard/'s, reached through hooks;
    // its collectives run on cs, ordered after s by events (free ones in ev[0 .. nev))
    const train_hooks_t *hooks;
    cudaStream_t cs;
    cudaEvent_t *ev;
    int nev, evcap;
    shard_mem_t mem;
};

#define CU(call, what)                                                                  \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess)                                                          \
            return weft_error_quiet(WEFT_ERR_SYSTEM, "cuda: %s: %s", what,              \
                                    cudaGetErrorString(e_));                            \
    } while (0)

#define BLAS(call, what)                                                                \
    do {                                                                                \
        cublasStatus_t b_ = (call);                                                     \
        if (b_ != CUBLAS_STATUS_SUCCESS)                                                \
            return weft_error_quiet(WEFT_ERR_SYSTEM, "cublas: %s: %s", what,            \
                                    cublas.status_string(b_));                         \
    } while (0)

int train_cuda_built(void)
{
    return 1;
}

weft_status_t train_cuda_probe(const char **name_p)
{
    static char name[256];
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "--device cuda: no CUDA device "
                                "visible (%s)", e != cudaSuccess ? cudaGetErrorString(e) :
                                "0 devices");
    struct cudaDeviceProp p;
    CU(cudaGetDeviceProperties(&p, 0), "device properties");
    snprintf(name, sizeof(name), "%s", p.name);
    if (name_p)
        *name_p = name;
    return WEFT_OK;
}

/* the compute type of the model's products: fp32 exact, or bf16 products summed in fp32 */
static cublasComputeType_t compute_type(const train_cuda_t *g)
{
    return g->bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
}

weft_status_t train_cuda_attention(const train_gpt2_cfg_t *c, int bf16, int *flash)
{
    const char *v = getenv("WEFT_TRAIN_ATTN");
    int fits = kcu_attention_fits(c->channels, c->num_heads);
    *flash = 0;
    if (!v || !*v || !strcmp(v, "auto")) {
        *flash = bf16 && fits;
        return WEFT_OK;
    }
    if (!strcmp(v, "matmul"))
        return WEFT_OK;
    if (strcmp(v, "flash"))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "WEFT_TRAIN_ATTN=%s: auto, flash or "
                                "matmul", v);
    if (!bf16 || !fits)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "WEFT_TRAIN_ATTN=flash needs --dtype "
                                "bf16 and a head size (channels / heads) of 16, 32, 64 or "
                                "128 (here %s, %d / %d)", bf16 ? "bf16" : "fp32",
                                c->channels, c->num_heads);
    *flash = 1;
    return WEFT_OK;
}

weft_status_t train_cuda_attention_run(const float *qkv, const float *dout, float *out,
                                       float *dqkv, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || !kcu_attention_fits(C, NH))
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "fused attention: B %d, T %d, C %d, "
                                "NH %d: no such kernel", B, T, C, NH);
    RETURN_IF_ERR(train_cuda_probe(NULL));
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, nr = (size_t)B * NH * T;
    float *d = NULL;
    CU(cudaMalloc((void **)&d, (2 * n3 + 2 * n1 + 2 * nr) * sizeof(float)), "alloc");
    float *dq = d, *dd = d + n3, *dout_d = dd + n3, *out_d = dout_d + n1, *lse = out_d + n1,
          *dsum = lse + nr;
    cudaError_t e = cudaMemcpy(dq, qkv, n3 * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dout_d, dout, n1 * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        kcu_attention_forward(out_d, lse, dq, B, T, C, NH, 0);
        kcu_attention_backward(dd, dsum, dout_d, dq, out_d, lse, B, T, C, NH, 0);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(out, out_d, n1 * sizeof(float), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(dqkv, dd, n3 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(d);
    CU(e, "fused attention");
    return WEFT_OK;
}

/* column-major C (m, n) = alpha op(A) op(B) + beta C, every operand fp32 in memory */
static weft_status_t gemm(train_cuda_t *g, int ta, int tb, int m, int n, int k,
                          const float *A, int lda, const float *B, int ldb, float beta,
                          float *C, int ldc)
{
    const float one = 1.0f;
    BLAS(cublas.gemm(g->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                      m, n, k, &one, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, &beta, C,
                      CUDA_R_32F, ldc, compute_type(g), CUBLAS_GEMM_DEFAULT), "gemm");
    return WEFT_OK;
}

/* the same with bf16 operands (fp32 product and sums): --dtype bf16's linear layers */
static weft_status_t gemm16(train_cuda_t *g, int ta, int tb, int m, int n, int k,
                            const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                            float *C, int ldc)
{
    const float one = 1.0f;
    BLAS(cublas.gemm(g->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                      m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                      CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "bf16 gemm");
    return WEFT_OK;
}

static weft_status_t gemm_batched(train_cuda_t *g, int ta, int tb, int m, int n, int k,
                                  const float *A, int lda, long long sa, const float *B,
                                  int ldb, long long sb, float *C, int ldc, long long sc,
                                  int count)
{
    const float one = 1.0f, zero = 0.0f;
    BLAS(cublas.gemm_batched(g->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, A,
                                    CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, &zero, C,
                                    CUDA_R_32F, ldc, sc, count, compute_type(g),
                                    CUBLAS_GEMM_DEFAULT), "batched gemm");
    return WEFT_OK;
}

/* Scratch for the fixed-order sums of the parameter gradients (layernorm, biases, the
 * norm): the attention regions q .. yh (7 of B*T*C floats, in order from q, 64-byte
 * aligned), free outside the attention calls; always >= 4C floats (B*T >= 1), so the
 * kernels get their one row. */
static float *sums_scratch(const train_cuda_t *g, size_t *floats)
{
    *floats = 7 * align16((size_t)g->B * g->T * g->cfg.channels);
    return g->q;
}

static size_t align64(size_t n)
{
    return (n + 63) / 64 * 64;
}

/* --dtype bf16: the linear layers' operands are converted to bf16 (kcu_to_bf16) into the
 * attention regions q .. yh, free outside the attention calls (14 B*T*C bf16 values), and
 * multiplied as bf16 (gemm16): cuBLAS's bf16 kernels, where fp32 operands in FAST_16BF
 * mode ran TF32 ones. The weight (`fixed` values) goes first, then `rows` rows of
 * `per_row` values at a time: the number of rows per pass, or 0 where not even one fits
 * (then the fp32 operands go to cuBLAS as before). */
static int bf16_rows(const train_cuda_t *g, size_t fixed, size_t per_row, int rows,
                     uint16_t **b16)
{
    size_t cap = 14 * align16((size_t)g->B * g->T * g->cfg.channels);
    *b16 = (uint16_t *)g->q;
    if (!g->bf16 || align64(fixed) + 128 + per_row > cap)
        return 0;
    size_t r = (cap - align64(fixed) - 128) / per_row;
    return r >= (size_t)rows ? rows : (int)r;
}

/* out (N, OC) = inp (N, C) . W (OC, C)^T + bias. in16: inp holds bf16 values (a
 * layernorm's or GELU's output written so, g->act16), which go to cuBLAS as they are. */
static weft_status_t mm_forward(train_cuda_t *g, float *out, const float *inp, int in16,
                                const float *w, const float *bias, int N, int C, int OC)
{
    uint16_t *b16;
    int R = bf16_rows(g, (size_t)OC * C, in16 ? 1 : (size_t)C, N, &b16);
    if (in16 && R < 1)   // g->act16 was set knowing the weights' copies fit
        return weft_error_quiet(WEFT_ERR_INTERNAL, "bf16 product: no room for the weights");
    if (R > 0) {
        uint16_t *w16 = b16, *x16 = b16 + align64((size_t)OC * C);
        kcu_to_bf16(w16, w, (size_t)OC * C, g->s);
        if (in16)
            R = N;
        for (int n0 = 0; n0 < N; n0 += R) {
            int r = N - n0 < R ? N - n0 : R;
            if (in16)
                x16 = (uint16_t *)inp + (size_t)n0 * C;
            else
                kcu_to_bf16(x16, inp + (size_t)n0 * C, (size_t)r * C, g->s);
            RETURN_IF_ERR(gemm16(g, 1, 0, OC, r, C, w16, C, x16, C, 0.0f,
                                 out + (size_t)n0 * OC, OC));
        }
    } else {
        RETURN_IF_ERR(gemm(g, 1, 0, OC, N, C, w, C, inp, C, 0.0f, out, OC));
    }
    if (bias)
        kcu_add_bias(out, bias, N, OC, g->s);
    return WEFT_OK;
}

/* dinp (N, C) = dout . W;  dW (OC, C) += dout^T . inp;  dbias += column sums of dout;
 * in16 as in mm_forward */
static weft_status_t mm_backward(train_cuda_t *g, float *dinp, float *dw, float *dbias,
                                 const float *dout, const float *inp, int in16,
                                 const float *w, int N, int C, int OC)
{
    uint16_t *b16;
    int R = bf16_rows(g, (size_t)OC * C, (size_t)OC + (in16 ? 0 : C) + 128, N, &b16);
    if (in16 && R < 1)
        return weft_error_quiet(WEFT_ERR_INTERNAL, "bf16 product: no room for the operands");
    if (R > 0) {   // by passes of R rows: dinp's rows, and dW's sum over rows in order
        uint16_t *w16 = b16, *d16 = b16 + align64((size_t)OC * C);
        uint16_t *x16 = d16 + align64((size_t)R * OC);
        kcu_to_bf16(w16, w, (size_t)OC * C, g->s);
        for (int n0 = 0; n0 < N; n0 += R) {
            int r = N - n0 < R ? N - n0 : R;
            kcu_to_bf16(d16, dout + (size_t)n0 * OC, (size_t)r * OC, g->s);
            if (in16)
                x16 = (uint16_t *)inp + (size_t)n0 * C;
            else
                kcu_to_bf16(x16, inp + (size_t)n0 * C, (size_t)r * C, g->s);
            RETURN_IF_ERR(gemm16(g, 0, 0, C, r, OC, w16, C, d16, OC, 0.0f,
                                 dinp + (size_t)n0 * C, C));
            RETURN_IF_ERR(gemm16(g, 0, 1, C, OC, r, x16, C, d16, OC, 1.0f, dw, C));
        }
    } else {
        RETURN_IF_ERR(gemm(g, 0, 0, C, N, OC, w, C, dout, OC, 0.0f, dinp, C));
        RETURN_IF_ERR(gemm(g, 0, 1, C, OC, N, inp, C, dout, OC, 1.0f, dw, C));
    }
    if (dbias) {
        size_t nf;
        float *sc = sums_scratch(g, &nf);
        kcu_bias_backward(dbias, dout, N, OC, sc, nf, g->s);
    }
    return WEFT_OK;
}

/* causal self-attention of one layer: qkv (B, T, 3C) -> out (B, T, C), att (B, NH, T, T);
 * with g->flash no (T, T) matrix: att's first B*NH*T floats hold the rows' log-sum-exp */
static weft_status_t attention_forward(train_cuda_t *g, float *out, float *att,
                                       const float *qkv, int B, int T)
{
    int C = g->cfg.channels, NH = g->cfg.num_heads, hs = C / NH;
    long long sh = (long long)T * hs, st = (long long)T * T;
    if (g->flash) {
        kcu_attention_forward(out, att, qkv, B, T, C, NH, g->s);
        return WEFT_OK;
    }
    kcu_qkv_split(g->q, g->k, g->v_, qkv, B, T, C, NH, g->s);
    // S (T, T) = q k^T per head, into att; then P = softmax(S / sqrt(hs)) in place
    RETURN_IF_ERR(gemm_batched(g, 1, 0, T, T, hs, g->k, hs, sh, g->q, hs, sh, att, T, st,
                               B * NH));
    kcu_softmax_causal(att, 1.0f / sqrtf((float)hs), B * NH, T, g->s);
    // y (T, hs) = P v per head, then back to (B, T, C)
    RETURN_IF_ERR(gemm_batched(g, 0, 0, hs, T, T, g->v_, hs, sh, att, T, st, g->yh, hs, sh,
                               B * NH));
    kcu_heads_permute(out, g->yh, B, T, C, NH, 1, g->s);
    return WEFT_OK;
}

static weft_status_t attention_backward(train_cuda_t *g, float *dqkv, const float *dout,
                                        const float *qkv, const float *out,
                                        const float *att, int B, int T)
{
    int C = g->cfg.channels, NH = g->cfg.num_heads, hs = C / NH;
    long long sh = (long long)T * hs, st = (long long)T * T;
    if (g->flash) {   // g->dP (B*NH*T*T floats) is scratch enough for the row sums
        kcu_attention_backward(dqkv, g->dP, dout, qkv, out, att, B, T, C, NH, g->s);
        return WEFT_OK;
    }
    kcu_qkv_split(g->q, g->k, g->v_, qkv, B, T, C, NH, g->s);
    kcu_heads_permute(g->yh, dout, B, T, C, NH, 0, g->s);   // dy, head-major
    RETURN_IF_ERR(gemm_batched(g, 1, 0, T, T, hs, g->v_, hs, sh, g->yh, hs, sh, g->dP, T, st,
                               B * NH));                    // dP = dy v^T
    RETURN_IF_ERR(gemm_batched(g, 0, 1, hs, T, T, g->yh, hs, sh, att, T, st, g->dv, hs, sh,
                               B * NH));                    // dv = P^T dy
    kcu_softmax_causal_backward(g->dP, att, 1.0f / sqrtf((float)hs), B * NH, T, g->s);
    RETURN_IF_ERR(gemm_batched(g, 0, 0, hs, T, T, g->k, hs, sh, g->dP, T, st, g->dq, hs, sh,
                               B * NH));                    // dq = dS k
    RETURN_IF_ERR(gemm_batched(g, 0, 1, hs, T, T, g->q, hs, sh, g->dP, T, st, g->dk, hs, sh,
                               B * NH));                    // dk = dS^T q
    kcu_qkv_merge(dqkv, g->dq, g->dk, g->dv, B, T, C, NH, g->s);
    return WEFT_OK;
}

/* --dtype bf16: the activations that only feed products (ln1, ln2, lnf, fch_gelu) can be
 * written as bf16 (g->act16) when every product on them gets its bf16 weight copy, and in
 * the backward one row of dout, into the scratch (bf16_rows) */
static int act16_fits(const train_cuda_t *g)
{
    size_t C = (size_t)g->cfg.channels, Vp = (size_t)g->cfg.padded_vocab_size;
    const size_t shape[][2] = { { 3 * C, C }, { 4 * C, C }, { C, 4 * C }, { Vp, C } };
    uint16_t *b16;
    for (size_t i = 0; g->bf16 && i < sizeof(shape) / sizeof(shape[0]); i++)
        if (bf16_rows(g, shape[i][0] * shape[i][1], shape[i][0] + 128, 1, &b16) < 1)
            return 0;
    return g->bf16;
}

/* a layernorm whose output only feeds products: bf16 with g->act16 */
static void layernorm_out(train_cuda_t *g, float *out, float *mean, float *rstd,
                          const float *inp, const float *w, const float *b, int N, int C)
{
    if (g->act16)
        kcu_layernorm_forward_bf16((uint16_t *)out, mean, rstd, inp, w, b, N, C, g->s);
    else
        kcu_layernorm_forward(out, mean, rstd, inp, w, b, N, C, g->s);
}

static weft_status_t block_forward(train_cuda_t *g, const train_block_t *p, int l,
                                   const float *residual, int B, int T)
{
    int C = g->cfg.channels, NH = g->cfg.num_heads, BT = B * T;
    train_acts_t *a = &g->acts;
    size_t btc = (size_t)BT * C;
    float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * btc * 3, *atty = a->atty + l * btc;
    float *att = a->att + (size_t)l * B * NH * T * T;
    float *residual2 = a->residual2 + l * btc, *ln2 = a->ln2 + l * btc;
    float *fch = a->fch + l * btc * 4, *fch_gelu = a->fch_gelu + l * btc * 4;
    float *residual3 = a->residual3 + l * btc;

    layernorm_out(g, ln1, a->ln1_mean + (size_t)l * BT, a->ln1_rstd + (size_t)l * BT,
                  residual, p->ln1w, p->ln1b, BT, C);
    RETURN_IF_ERR(mm_forward(g, qkv, ln1, g->act16, p->qkvw, p->qkvb, BT, C, 3 * C));
    RETURN_IF_ERR(attention_forward(g, atty, att, qkv, B, T));
    RETURN_IF_ERR(mm_forward(g, residual2, atty, 0, p->attprojw, p->attprojb, BT, C, C));
    kcu_residual_forward(residual2, residual, residual2, btc, g->s);
    layernorm_out(g, ln2, a->ln2_mean + (size_t)l * BT, a->ln2_rstd + (size_t)l * BT,
                  residual2, p->ln2w, p->ln2b, BT, C);
    RETURN_IF_ERR(mm_forward(g, fch, ln2, g->act16, p->fcw, p->fcb, BT, C, 4 * C));
    if (g->act16)
        kcu_gelu_forward_bf16((uint16_t *)fch_gelu, fch, btc * 4, g->s);
    else
        kcu_gelu_forward(fch_gelu, fch, btc * 4, g->s);
    RETURN_IF_ERR(mm_forward(g, residual3, fch_gelu, g->act16, p->fcprojw, p->fcprojb, BT,
                             4 * C, C));
    kcu_residual_forward(residual3, residual2, residual3, btc, g->s);
    return WEFT_OK;
}

/* The encoder backward's token index of the BT inputs (kcu_encoder_backward's layout:
 * order | starts | toks) into g->h_index, by a counting sort: stable, so each token's
 * positions ascend; g->ntok distinct tokens. Inputs are checked to be in [0, V). */
static void tokens_index(train_cuda_t *g, const int *inputs, int BT)
{
    int V = g->cfg.vocab_size, *cnt = g->h_count, *order = g->h_index;
    int *starts = order + BT, *toks = starts + BT + 1, nu = 0;
    memset(cnt, 0, ((size_t)V + 1) * sizeof(int));
    for (int i = 0; i < BT; i++)
        cnt[inputs[i] + 1]++;
    for (int v = 0; v < V; v++) {
        if (cnt[v + 1]) {
            starts[nu] = cnt[v];
            toks[nu++] = v;
        }
        cnt[v + 1] += cnt[v];   // now cnt[v] is token v's first slot
    }
    starts[nu] = BT;
    for (int i = 0; i < BT; i++)
        order[cnt[inputs[i]]++] = i;
    g->ntok = nu;
}

weft_status_t train_cuda_forward(train_cuda_t *g, const int *inputs, const int *targets,
                                 int B, int T, float *loss_p)
{
    const train_gpt2_cfg_t *c = &g->cfg;
    if (B > g->B || T > g->T || B <= 0 || T <= 0)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "forward: batch %d x %d exceeds "
                                "the prepared %d x %d", B, T, g->B, g->T);
    int V = c->vocab_size, Vp = c->padded_vocab_size, L = c->num_layers, C = c->channels;
    int BT = B * T;
    RETURN_IF_ERR(train_check_tokens(inputs, targets, BT, V));
    train_acts_t *a = &g->acts;
    size_t btc = (size_t)BT * C;
    train_emb_t emb;
    train_block_t blk;
    train_lnf_t lnf;

    float *u;
    const train_hooks_t *h = g->hooks;

    g->have_targets = 0;
    CU(cudaMemcpyAsync(g->inputs, inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice,
                       g->s), "copy inputs");
    if (targets) {   // a backward may follow: the encoder's token index goes along
        CU(cudaMemcpyAsync(g->targets, targets, (size_t)BT * sizeof(int),
                           cudaMemcpyHostToDevice, g->s), "copy targets");
        tokens_index(g, inputs, BT);
        CU(cudaMemcpyAsync(g->tokens, g->h_index, (3 * (size_t)BT + 1) * sizeof(int),
                           cudaMemcpyHostToDevice, g->s), "copy the token index");
    }
    RETURN_IF_ERR(train_unit_params(h, g->params, c, TRAIN_UNIT_EMB, 0, &u));
    train_emb_carve(&emb, u, c);
    kcu_encoder_forward(a->encoded, g->inputs, emb.wte, emb.wpe, B, T, C, g->s);
    const float *residual = a->encoded;
    for (int l = 0; l < L; l++) {
        RETURN_IF_ERR(train_unit_params(h, g->params, c, TRAIN_UNIT_BLOCK(l), 0, &u));
        train_block_carve(&blk, u, c);
        RETURN_IF_ERR(block_forward(g, &blk, l, residual, B, T));
        RETURN_IF_ERR(train_unit_params_done(h, TRAIN_UNIT_BLOCK(l), 0));
        residual = a->residual3 + l * btc;
    }
    RETURN_IF_ERR(train_unit_params(h, g->params, c, TRAIN_UNIT_LNF(L), 0, &u));
    train_lnf_carve(&lnf, u, c);
    layernorm_out(g, a->lnf, a->lnf_mean, a->lnf_rstd, residual, lnf.lnfw, lnf.lnfb, BT, C);
    // the head over all Vp rows of wte (the padded ones are zero): logits rows of Vp, a
    // multiple of 128, so cuBLAS gets aligned leading dimensions (V = 50257 is odd)
    RETURN_IF_ERR(mm_forward(g, a->logits, a->lnf, g->act16, emb.wte, NULL, BT, C, Vp));
    if (!targets) {   // no backward follows: the head and the final norm are done
        RETURN_IF_ERR(train_unit_params_done(h, TRAIN_UNIT_LNF(L), 0));
        RETURN_IF_ERR(train_unit_params_done(h, TRAIN_UNIT_EMB, 0));
    }
    g->last_B = B;
    g->last_T = T;
    *loss_p = -1.0f;
    if (targets) {
        float sum;
        kcu_crossentropy_forward(a->losses, a->lse, a->logits, g->targets, BT, V, Vp, g->s);
        kcu_sum(g->loss_sum, a->losses, BT, g->s);
        CU(cudaMemcpyAsync(&sum, g->loss_sum, sizeof(float), cudaMemcpyDeviceToHost, g->s),
           "copy loss");
        CU(cudaStreamSynchronize(g->s), "forward");
        *loss_p = sum / (float)BT;
        g->have_targets = 1;
    }
    CU(cudaGetLastError(), "forward kernels");
    return WEFT_OK;
}

/* the calls that work on the whole state, which a sharded model does not hold */
static weft_status_t own_state(const train_cuda_t *g, const char *what)
{
    if (g->hooks)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "%s: this device model is sharded: "
                                "shard/ holds its parameters, gradients and moments", what);
    return WEFT_OK;
}

weft_status_t train_cuda_zero_grad(train_cuda_t *g)
{
    RETURN_IF_ERR(own_state(g, "zero_grad"));
    CU(cudaMemsetAsync(g->grads, 0, g->num_params * sizeof(float), g->s), "zero grads");
    return WEFT_OK;
}

static weft_status_t block_backward(train_cuda_t *g, const train_block_t *p,
                                    const train_block_t *gr, int l, const float *residual,
                                    int B, int T)
{
    int C = g->cfg.channels, NH = g->cfg.num_heads, BT = B * T;
    train_acts_t *a = &g->acts;
    train_scratch_t *s = &g->scratch;
    size_t btc = (size_t)BT * C;
    float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * btc * 3, *atty = a->atty + l * btc;
    float *att = a->att + (size_t)l * B * NH * T * T;
    float *residual2 = a->residual2 + l * btc, *ln2 = a->ln2 + l * btc;
    float *fch = a->fch + l * btc * 4, *fch_gelu = a->fch_gelu + l * btc * 4;
    size_t nf;
    float *sc = sums_scratch(g, &nf);

    RETURN_IF_ERR(mm_backward(g, s->dfch, gr->fcprojw, gr->fcprojb, s->dresidual, fch_gelu,
                              g->act16, p->fcprojw, BT, 4 * C, C));
    kcu_gelu_backward(s->dfch, fch, s->dfch, btc * 4, g->s);
    RETURN_IF_ERR(mm_backward(g, s->dln, gr->fcw, gr->fcb, s->dfch, ln2, g->act16, p->fcw, BT,
                              C, 4 * C));
    kcu_layernorm_backward(s->dresidual, gr->ln2w, gr->ln2b, s->dln, residual2, p->ln2w,
                           a->ln2_mean + (size_t)l * BT, a->ln2_rstd + (size_t)l * BT, BT, C,
                           sc, nf, g->s);
    RETURN_IF_ERR(mm_backward(g, s->dln, gr->attprojw, gr->attprojb, s->dresidual, atty, 0,
                              p->attprojw, BT, C, C));
    RETURN_IF_ERR(attention_backward(g, s->dqkv, s->dln, qkv, atty, att, B, T));
    RETURN_IF_ERR(mm_backward(g, s->dln, gr->qkvw, gr->qkvb, s->dqkv, ln1, g->act16, p->qkvw,
                              BT, C, 3 * C));
    kcu_layernorm_backward(s->dresidual, gr->ln1w, gr->ln1b, s->dln, residual, p->ln1w,
                           a->ln1_mean + (size_t)l * BT, a->ln1_rstd + (size_t)l * BT, BT, C,
                           sc, nf, g->s);
    return WEFT_OK;
}

weft_status_t train_cuda_backward(train_cuda_t *g, float loss_scale)
{
    if (!g->have_targets)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG,
                                "backward: needs a forward with targets first");
    g->have_targets = 0;   // logits are about to hold dlogits
    const train_gpt2_cfg_t *c = &g->cfg;
    int B = g->last_B, T = g->last_T, BT = B * T;
    int V = c->vocab_size, Vp = c->padded_vocab_size, L = c->num_layers, C = c->channels;
    train_acts_t *a = &g->acts;
    train_scratch_t *s = &g->scratch;
    size_t btc = (size_t)BT * C;
    train_emb_t emb, gemb;
    train_lnf_t lnf, glnf;
    train_block_t blk, gblk;

    const train_hooks_t *h = g->hooks;
    float *u, *gu;

    RETURN_IF_ERR(train_unit_params(h, g->params, c, TRAIN_UNIT_EMB, 1, &u));
    RETURN_IF_ERR(train_unit_grads(h, g->grads, c, TRAIN_UNIT_EMB, &gu));
    train_emb_carve(&emb, u, c);
    train_emb_carve(&gemb, gu, c);
    kcu_crossentropy_backward(a->logits, a->logits, a->lse, g->targets,
                              loss_scale / (float)BT, BT, V, Vp, g->s);
    RETURN_IF_ERR(mm_backward(g, s->dln, gemb.wte, NULL, a->logits, a->lnf, g->act16, emb.wte,
                              BT, C, Vp));
    CU(cudaMemsetAsync(s->dresidual, 0, btc * sizeof(float), g->s), "zero dresidual");
    const float *res_last = a->residual3 + (L - 1) * btc;
    RETURN_IF_ERR(train_unit_params(h, g->params, c, TRAIN_UNIT_LNF(L), 1, &u));
    RETURN_IF_ERR(train_unit_grads(h, g->grads, c, TRAIN_UNIT_LNF(L), &gu));
    train_lnf_carve(&lnf, u, c);
    train_lnf_carve(&glnf, gu, c);
    size_t nf;
    float *sc = sums_scratch(g, &nf);
    kcu_layernorm_backward(s->dresidual, glnf.lnfw, glnf.lnfb, s->dln, res_last, lnf.lnfw,
                           a->lnf_mean, a->lnf_rstd, BT, C, sc, nf, g->s);
    RETURN_IF_ERR(train_unit_grads_done(h, TRAIN_UNIT_LNF(L)));
    RETURN_IF_ERR(train_unit_params_done(h, TRAIN_UNIT_LNF(L), 1));
    for (int l = L - 1; l >= 0; l--) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * btc;
        RETURN_IF_ERR(train_unit_params(h, g->params, c, TRAIN_UNIT_BLOCK(l), 1, &u));
        RETURN_IF_ERR(train_unit_grads(h, g->grads, c, TRAIN_UNIT_BLOCK(l), &gu));
        train_block_carve(&blk, u, c);
        train_block_carve(&gblk, gu, c);
        RETURN_IF_ERR(block_backward(g, &blk, &gblk, l, residual, B, T));
        RETURN_IF_ERR(train_unit_grads_done(h, TRAIN_UNIT_BLOCK(l)));
        RETURN_IF_ERR(train_unit_params_done(h, TRAIN_UNIT_BLOCK(l), 1));
    }
    // the tied wte: its gradient from the head and from the encoder, reduced once
    kcu_encoder_backward(gemb.wte, gemb.wpe, s->dresidual, g->tokens, g->ntok, B, T, C,
                         g->s);
    RETURN_IF_ERR(train_unit_grads_done(h, TRAIN_UNIT_EMB));
    RETURN_IF_ERR(train_unit_params_done(h, TRAIN_UNIT_EMB, 1));
    CU(cudaGetLastError(), "backward kernels");
    return WEFT_OK;
}

weft_status_t train_cuda_clip_grad(train_cuda_t *g, float clip, float *norm_p)
{
    RETURN_IF_ERR(own_state(g, "clip_grad"));
    double ss = 0.0;
    CU(cudaMemsetAsync(g->sumsq, 0, sizeof(double), g->s), "zero norm");
    size_t nf;
    float *sc = sums_scratch(g, &nf);
    kcu_sumsq(g->sumsq, g->grads, g->num_params, (double *)sc, nf / 2, g->s);
    CU(cudaMemcpyAsync(&ss, g->sumsq, sizeof(double), cudaMemcpyDeviceToHost, g->s),
       "copy norm");
    CU(cudaStreamSynchronize(g->s), "gradient norm");
    float norm = (float)sqrt(ss);
    if (clip > 0.0f) {
        float coef = clip / (norm + 1e-6f);
        if (coef < 1.0f)
            kcu_scale(g->grads, coef, g->num_params, g->s);
    }
    *norm_p = norm;
    CU(cudaGetLastError(), "clip kernels");
    return WEFT_OK;
}

weft_status_t train_cuda_update(train_cuda_t *g, float lr, float beta1, float beta2,
                                float eps, float wd, int t)
{
    if (t < 1)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "update: step < 1");
    RETURN_IF_ERR(own_state(g, "update"));
    for (int u = 0; u < g->cfg.num_layers + 2; u++) {
        train_seg_t segs[TRAIN_BLOCK_TENSORS];
        int ns = train_unit_segs(&g->cfg, u, segs);
        size_t base = train_unit_off(&g->cfg, u);
        for (int j = 0; j < ns; j++) {
            size_t o = base + segs[j].off;
            kcu_adamw(g->params + o, g->m + o, g->v + o, g->grads + o, segs[j].len, lr, beta1,
                      beta2, eps, segs[j].decays ? wd : 0.0f, t, g->s);
        }
    }
    g->have_moments = 1;
    CU(cudaGetLastError(), "adamw");
    return WEFT_OK;
}

weft_status_t train_cuda_sync(train_cuda_t *g)
{
    CU(cudaStreamSynchronize(g->s), "synchronize");
    return WEFT_OK;
}

weft_status_t train_cuda_download(train_cuda_t *g, train_gpt2_t *m, int grads)
{
    size_t bytes = g->num_params * sizeof(float);
    RETURN_IF_ERR(own_state(g, "download"));
    if (grads && !m->grads_mem)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "download: the host model has no "
                                "gradient buffer");
    if (g->have_moments) {
        if (!m->m_mem && !(m->m_mem = train_alloc_floats(g->num_params)))
            return weft_error_quiet(WEFT_ERR_NO_MEMORY, "download: AdamW state");
        if (!m->v_mem && !(m->v_mem = train_alloc_floats(g->num_params)))
            return weft_error_quiet(WEFT_ERR_NO_MEMORY, "download: AdamW state");
    }
    CU(cudaStreamSynchronize(g->s), "synchronize");
    CU(cudaMemcpy(m->params_mem, g->params, bytes, cudaMemcpyDeviceToHost), "parameters");
    if (g->have_moments) {
        CU(cudaMemcpy(m->m_mem, g->m, bytes, cudaMemcpyDeviceToHost), "AdamW m");
        CU(cudaMemcpy(m->v_mem, g->v, bytes, cudaMemcpyDeviceToHost), "AdamW v");
    }
    if (grads)
        CU(cudaMemcpy(m->grads_mem, g->grads, bytes, cudaMemcpyDeviceToHost), "gradients");
    return WEFT_OK;
}

void train_cuda_destroy(train_cuda_t *g)
{
    if (!g)
        return;
    // one allocation each for the state and the activations (see create)
    cudaFree(g->params);
    cudaFree(g->acts_mem);
    if (g->blas)
        cublas.destroy(g->blas);
    for (int i = 0; i < g->nev; i++)
        cudaEventDestroy(g->ev[i]);
    free(g->ev);
    free(g->h_index);
    free(g->h_count);
    if (g->cs)
        cudaStreamDestroy(g->cs);
    if (g->s)
        cudaStreamDestroy(g->s);
    free(g);
}

static weft_status_t create(train_cuda_t *g, const train_gpt2_t *m, int B, int T, int own,
                            int dev)
{
    const train_gpt2_cfg_t *c = &m->cfg;
    size_t np = m->num_params, bytes = np * sizeof(float), nacts, nscratch;
    size_t need = train_cuda_bytes(c, B, T) - (own ? 0 : 4 * bytes), free_b = 0, total_b = 0;
    CU(cudaSetDevice(dev), "select the device");
    CU(cudaMemGetInfo(&free_b, &total_b), "memory info");
    if (need > free_b)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "--device cuda: batch %d x %d needs "
                                "%.2f GiB of device memory, %.2f GiB free (lower -b)", B, T,
                                need / 1073741824.0, free_b / 1073741824.0);
    CU(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking), "stream");
    BLAS(cublas.create(&g->blas), "create handle");
    BLAS(cublas.set_stream(g->blas, g->s), "set stream");
    // fp32 means fp32: the default math mode takes no TF32 for CUBLAS_COMPUTE_32F (only
    // NVIDIA_TF32_OVERRIDE or CUBLAS_TF32_TENSOR_OP_MATH would), FAST_16BF is asked per call
    BLAS(cublas.set_math_mode(g->blas, CUBLAS_DEFAULT_MATH), "math mode");
    if (!own)
        CU(cudaStreamCreateWithFlags(&g->cs, cudaStreamNonBlocking), "collective stream");
    if (own) {
        CU(cudaMalloc((void **)&g->params, 4 * bytes), "parameters, gradients, moments");
        g->grads = g->params + np;
        g->m = g->grads + np;
        g->v = g->m + np;
    }
    train_gpt2_act_split(c, B, T, &nacts, &nscratch);
    size_t extra = train_cuda_extra_floats(c, B, T), btc = align16((size_t)B * T * c->channels);
    size_t nf = nacts + nscratch + extra + 16;   // + loss sum, norm (aligned)
    CU(cudaMalloc((void **)&g->acts_mem, nf * sizeof(float) +
                  (5 * (size_t)B * T + 1) * sizeof(int)), "activations");
    g->h_index = malloc((3 * (size_t)B * T + 1) * sizeof(int));
    g->h_count = malloc(((size_t)c->vocab_size + 1) * sizeof(int));
    if (!g->h_index || !g->h_count)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "--device cuda: out of memory");
    g->scratch_mem = g->acts_mem + nacts;
    train_gpt2_act_carve(&g->acts, &g->scratch, g->acts_mem, g->scratch_mem, c, B, T);
    float *x = g->scratch_mem + nscratch;
    float **att[] = { &g->q, &g->k, &g->v_, &g->dq, &g->dk, &g->dv, &g->yh };
    for (size_t i = 0; i < sizeof(att) / sizeof(att[0]); i++, x += btc)
        *att[i] = x;
    g->dP = x;
    x += align16((size_t)B * c->num_heads * T * T);
    g->sumsq = (double *)x;   // 8-byte aligned: every region above is a multiple of 16 floats
    g->loss_sum = x + 2;
    g->inputs = (int *)(x + 16);
    g->targets = g->inputs + (size_t)B * T;
    g->tokens = g->targets + (size_t)B * T;
    if (!own)
        return WEFT_OK;
    CU(cudaMemcpy(g->params, m->params_mem, bytes, cudaMemcpyHostToDevice), "upload params");
    CU(cudaMemset(g->grads, 0, 3 * bytes), "zero gradients and moments");
    if (m->m_mem && m->v_mem) {   // a resumed run's optimizer state
        CU(cudaMemcpy(g->m, m->m_mem, bytes, cudaMemcpyHostToDevice), "upload AdamW m");
        CU(cudaMemcpy(g->v, m->v_mem, bytes, cudaMemcpyHostToDevice), "upload AdamW v");
        g->have_moments = 1;
    }
    // the copies and memsets above ran on the legacy stream, which g->s (non-blocking)
    // does not wait for
    CU(cudaDeviceSynchronize(), "upload");
    return WEFT_OK;
}

static weft_status_t create_model(train_cuda_t **g_p, const train_gpt2_t *m, int B, int T,
                                  int bf16, int own, int dev)
{
    *g_p = NULL;
    if (B <= 0 || T <= 0 || T > m->cfg.max_seq_len)
        return weft_error_quiet(WEFT_ERR_INVALID_ARG, "batch %d x %d invalid (sequence "
                                "length must be 1..%d)", B, T, m->cfg.max_seq_len);
    RETURN_IF_ERR(train_cuda_probe(NULL));
    RETURN_IF_ERR(cublas_ready());
    train_cuda_t *g = calloc(1, sizeof(*g));
    if (!g)
        return weft_error_quiet(WEFT_ERR_NO_MEMORY, "--device cuda: out of memory");
    g->cfg = m->cfg;
    g->num_params = m->num_params;
    g->B = B;
    g->T = T;
    g->bf16 = bf16 ? 1 : 0;
    g->act16 = act16_fits(g);
    weft_status_t st = train_cuda_attention(&m->cfg, g->bf16, &g->flash);
    if (st != WEFT_OK) {
        free(g);
        return st;
    }
    st = create(g, m, B, T, own, dev);
    if (st != WEFT_OK) {
        train_cuda_destroy(g);
        return st;
    }
    *g_p = g;
    return WEFT_OK;
}

weft_status_t train_cuda_create(train_cuda_t **g_p, const train_gpt2_t *m, int B, int T,
                                int bf16)
{
    return create_model(g_p, m, B, T, bf16, 1, 0);
}

weft_status_t train_cuda_create_sharded(train_cuda_t **g_p, const train_gpt2_t *m, int B,
                                        int T, int bf16, int local_rank)
{
    int n = 0;
    CU(cudaGetDeviceCount(&n), "count devices");
    return create_model(g_p, m, B, T, bf16, 0, n > 0 && local_rank > 0 ? local_rank % n : 0);
}

void train_cuda_set_hooks(train_cuda_t *g, const train_hooks_t *hooks)
{
    g->hooks = hooks;
}

/* ---- shard/'s device table (shard_mem_t): buffers in device memory, its arithmetic on
 * the model's stream s, its collectives (weft_cuda.h) on cs after an event of s; each
 * request is an event of cs, and waiting for it makes s wait ---- */

static void *dm_alloc(void *ctx, size_t bytes)
{
    train_cuda_t *g = ctx;
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess)
        return NULL;
    if (cudaMemsetAsync(p, 0, bytes, g->s) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void dm_free(void *ctx, void *p)
{
    train_cuda_t *g = ctx;
    cudaStreamSynchronize(g->s);   // nothing queued may still use it
    cudaStreamSynchronize(g->cs);
    cudaFree(p);
}

static weft_status_t dm_upload(void *ctx, void *dst, const void *host, size_t bytes)
{
    train_cuda_t *g = ctx;
    CU(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, g->s), "shard: upload");
    CU(cudaStreamSynchronize(g->s), "shard: upload");   // the host copy may go now
    return WEFT_OK;
}

static weft_status_t dm_download(void *ctx, void *host, const void *src, size_t bytes)
{
    train_cuda_t *g = ctx;
    CU(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, g->s), "shard: download");
    CU(cudaStreamSynchronize(g->s), "shard: download");
    return WEFT_OK;
}

static weft_status_t dm_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    train_cuda_t *g = ctx;
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->s), "shard: copy");
    return WEFT_OK;
}

static weft_status_t dm_zero(void *ctx, void *p, size_t bytes)
{
    train_cuda_t *g = ctx;
    CU(cudaMemsetAsync(p, 0, bytes, g->s), "shard: zero");
    return WEFT_OK;
}

static weft_status_t dm_to_bf16(void *ctx, uint16_t *dst, const float *src, size_t n)
{
    train_cuda_t *g = ctx;
    kcu_to_bf16(dst, src, n, g->s);
    CU(cudaGetLastError(), "shard: to bf16");
    return WEFT_OK;
}

static weft_status_t dm_from_bf16(void *ctx, float *dst, const uint16_t *src, size_t n)
{
    train_cuda_t *g = ctx;
    kcu_from_bf16(dst, src, n, g->s);
    CU(cudaGetLastError(), "shard: from bf16");
    return WEFT_OK;
}

static weft_status_t dm_add(void *ctx, float *y, const void *x, size_t n, int bf16)
{
    train_cuda_t *g = ctx;
    kcu_add(y, x, n, bf16, g->s);
    CU(cudaGetLastError(), "shard: add");
    return WEFT_OK;
}

static weft_status_t dm_sumsq(void *ctx, const float *const *x, const size_t *n, int count,
                              double *sum_p)
{
    train_cuda_t *g = ctx;
    double ss = 0.0;
    CU(cudaMemsetAsync(g->sumsq, 0, sizeof(double), g->s), "shard: zero norm");
    size_t nf;
    float *sc = sums_scratch(g, &nf);
    for (int k = 0; k < count; k++)
        kcu_sumsq(g->sumsq, x[k], n[k], (double *)sc, nf / 2, g->s);
    CU(cudaMemcpyAsync(&ss, g->sumsq, sizeof(double), cudaMemcpyDeviceToHost, g->s),
       "shard: copy norm");
    CU(cudaStreamSynchronize(g->s), "shard: gradient norm");
    *sum_p = ss;
    return WEFT_OK;
}

static weft_status_t dm_scale(void *ctx, float *x, float a, size_t n)
{
    train_cuda_t *g = ctx;
    kcu_scale(x, a, n, g->s);
    CU(cudaGetLastError(), "shard: scale");
    return WEFT_OK;
}

static weft_status_t dm_adamw(void *ctx, float *p, float *m, float *v, const float *gr,
                              size_t n, float lr, float b1, float b2, float eps, float wd,
                              int t)
{
    train_cuda_t *g = ctx;
    kcu_adamw(p, m, v, gr, n, lr, b1, b2, eps, wd, t, g->s);
    CU(cudaGetLastError(), "shard: adamw");
    return WEFT_OK;
}

static weft_status_t ev_take(train_cuda_t *g, cudaEvent_t *e_p)
{
    if (g->nev > 0) {
        *e_p = g->ev[--g->nev];
        return WEFT_OK;
    }
    CU(cudaEventCreateWithFlags(e_p, cudaEventDisableTiming), "shard: event");
    return WEFT_OK;
}

static void ev_give(train_cuda_t *g, cudaEvent_t e)
{
    if (g->nev == g->evcap) {
        int cap = g->evcap ? 2 * g->evcap : 16;
        cudaEvent_t *n = realloc(g->ev, (size_t)cap * sizeof(*n));
        if (!n) {
            cudaEventDestroy(e);
            return;
        }
        g->ev = n;
        g->evcap = cap;
    }
    g->ev[g->nev++] = e;
}

static weft_status_t dm_coll(void *ctx, shard_coll_t kind, const void *send, void *recv,
                             size_t count, weft_dtype_t dt, weft_comm_t *comm, void **req_p)
{
    train_cuda_t *g = ctx;
    cudaEvent_t before, after;
    // cs runs the collective after everything queued on s so far: the gradient backward
    // wrote, and the last reads of a pooled buffer shard/ hands the collective to fill
    RETURN_IF_ERR(ev_take(g, &before));
    cudaError_t e = cudaEventRecord(before, g->s);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(g->cs, before, 0);
    ev_give(g, before);
    CU(e, "shard: order a collective after the model's work");
    weft_status_t st;
    switch (kind) {
    case SHARD_COLL_ALLGATHER:
        st = weft_allgather_stream(send, recv, count, dt, comm, g->cs);
        break;
    case SHARD_COLL_REDUCE_SCATTER:
        st = weft_reduce_scatter_stream(send, recv, count, dt, WEFT_SUM, comm, g->cs);
        break;
    default:
        st = weft_allreduce_stream(send, recv, count, dt, WEFT_SUM, comm, g->cs);
        break;
    }
    RETURN_IF_ERR(st);
    RETURN_IF_ERR(ev_take(g, &after));
    if ((e = cudaEventRecord(after, g->cs)) != cudaSuccess) {
        ev_give(g, after);
        CU(e, "shard: record a collective");
    }
    *req_p = after;
    return WEFT_OK;
}

static weft_status_t dm_wait(void *ctx, void *req)
{
    train_cuda_t *g = ctx;
    cudaError_t e = cudaStreamWaitEvent(g->s, (cudaEvent_t)req, 0);
    ev_give(g, (cudaEvent_t)req);
    CU(e, "shard: wait for a collective");
    return WEFT_OK;
}

static weft_status_t dm_test(void *ctx, void *req, int *done_p)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)req);
    *done_p = e == cudaSuccess;
    if (e != cudaSuccess && e != cudaErrorNotReady)
        CU(e, "shard: test a collective");
    return WEFT_OK;
}

// a queued stream call that failed after it returned (weft_cuda.h's stream queue): once
// the collectives' stream has passed every call, each rank's queue knows of any failure
// (it marks it before it lets the stream go on), so every rank answers alike; before,
// a rank whose queue had not yet reached the failed call would say none and go on
static weft_status_t dm_errors(void *ctx, weft_comm_t *comm)
{
    train_cuda_t *g = ctx;
    CU(cudaStreamSynchronize(g->cs), "shard: wait for the collectives");
    return weft_stream_error(comm);
}

const shard_mem_t *train_cuda_shard_mem(train_cuda_t *g)
{
    g->mem = (shard_mem_t){
        .ctx = g, .alloc = dm_alloc, .free = dm_free, .upload = dm_upload,
        .download = dm_download, .copy = dm_copy, .zero = dm_zero, .to_bf16 = dm_to_bf16,
        .from_bf16 = dm_from_bf16, .add = dm_add, .sumsq = dm_sumsq, .scale = dm_scale,
        .adamw = dm_adamw, .coll = dm_coll, .wait = dm_wait, .test = dm_test,
        .errors = dm_errors,
    };
    return &g->mem;
}

#endif

