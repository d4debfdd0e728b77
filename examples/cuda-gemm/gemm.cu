// gemm.cu: single-precision GEMM C = A * B (row-major, fp32, CUDA cores, no tensor cores), the
// CUDA example kernel for Shoal. A is MxK, B is KxN, C is MxN.
//
// Compile-time parameters (-DNAME=value; the defaults below are one good setting):
//   BM, BN  C tile of one thread block (rows, columns)
//   BK      depth of the shared-memory tiles (the k-step of the main loop)
//   TM, TN  C entries per thread (rows, columns): a TM x TN register block, read from shared
//           memory as float4s
//   PIPE    1: one shared buffer, load then compute, two barriers per k-step;
//           2: double-buffered shared memory, the next k-tile is loaded into registers while the
//              current one is computed, one barrier per k-step
//   FAULT   0 (default); 1: an out-of-bounds write far outside any allocation (the kernel then
//           fails with cudaErrorIllegalAddress); 2: the kernel spins forever. Only faults.toml
//           sets it, to show how Shoal records a crash and a hang.
//
// One run-time parameter (shoal_run's run_params, e.g. "GROUP=8"; absent: 1):
//   GROUP   the order in which thread blocks walk C: in groups of GROUP block rows, column by
//           column within a group, so that blocks resident at the same time share A's rows and
//           B's columns in L2. 1 is plain row-major order. Any value >= 1 is correct for any
//           shape (the last group takes the rows left).
//
// A block has (BM/TM) * (BN/TN) threads. Every combination that passes the static_asserts below
// is correct for every shape with M % BM == 0, N % BN == 0 and K % BK == 0 (shoal_run answers
// SHOAL_NOT_APPLICABLE for other shapes); spec.toml's rules mirror these asserts.
//
// Two builds of this one file:
//   * default: a shared object for Shoal's library mode, exporting the four functions of
//     include/shoal_kernel.h (build it with -Xcompiler -fPIC -shared -cudart shared);
//   * -DSHOAL_STANDALONE: an executable for process mode,
//       gemm [-w WARMUP] [-r REPEAT] M N K [M N K ...]
//     printing one line per shape,
//       M=<m> N=<n> K=<k> time_us=<median> tflops=<rate> verdict=PASS|FAIL
//     exit 0 when it measured (whatever the verdict), 1 on a CUDA error (message on stderr),
//     2 on bad arguments, 3 when the shape does not fit the tiles.
//
// Both builds share the code below: prepare (inputs from a fixed hash, the reference computed
// once by a simple shared-memory kernel with double accumulators), run (warm-up, then each timed
// repetition between two CUDA events, then a check of every entry of C on the GPU) and release.

#include <cuda_runtime.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shoal_kernel.h"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef PIPE
#define PIPE 2
#endif
#ifndef FAULT
#define FAULT 0
#endif

// Floats of padding after each k-row of the transposed A tile in shared memory (keeps float4
// alignment: BM + APAD is a multiple of 4).
#define APAD 4
#define NTHREADS ((BM / TM) * (BN / TN))

static_assert(BM > 0 && BN > 0 && BK > 0 && TM > 0 && TN > 0, "sizes must be positive");
static_assert(BM % TM == 0 && BN % TN == 0, "a block's C tile splits evenly into thread blocks");
static_assert(TM % 4 == 0 && TN % 4 == 0, "register blocks are read as float4s");
static_assert(BK % 4 == 0, "tiles are loaded from global memory as float4s along K and N");
static_assert(NTHREADS >= 32 && NTHREADS <= 1024, "a thread block has 32..1024 threads");
static_assert((BM * BK / 4) % NTHREADS == 0, "the A tile's float4s split evenly over threads");
static_assert((BN * BK / 4) % NTHREADS == 0, "the B tile's float4s split evenly over threads");
static_assert(PIPE == 1 || PIPE == 2, "PIPE is 1 (single buffer) or 2 (double buffer)");
static_assert(PIPE * BK * (BM + APAD + BN) * 4 <= 48 * 1024,
              "static shared memory is at most 48 KiB");
static_assert(FAULT >= 0 && FAULT <= 2, "FAULT is 0, 1 or 2");

// ---------------------------------------------------------------------------------------------
// The tuned kernel.
//
// Thread t owns rows  ((i/4) * (BM/TM) + tr) * 4 + i%4  for i < TM   (tr = t / (BN/TN))
//        and columns ((j/4) * (BN/TN) + tc) * 4 + j%4  for j < TN   (tc = t % (BN/TN))
// of the block's C tile: groups of 4 consecutive rows/columns, strided so that neighbouring
// threads read neighbouring float4s of shared memory (no bank conflicts) and write neighbouring
// float4s of C (coalesced).

#if FAULT == 2
__device__ volatile int shoal_never_set = 0;
#endif

template <int kBM, int kBN, int kBK, int kTM, int kTN, int kPIPE>
__global__ void __launch_bounds__((kBM / kTM) * (kBN / kTN))
    sgemm_tiled(int M, int N, int K, int group, const float *__restrict__ A,
                const float *__restrict__ B, float *__restrict__ C) {
    constexpr int kNT = (kBM / kTM) * (kBN / kTN);
    constexpr int kAL = kBM * kBK / 4 / kNT; // float4 loads of A per thread and k-tile
    constexpr int kBL = kBK * kBN / 4 / kNT; // float4 loads of B per thread and k-tile
    constexpr int kLDA = kBM + APAD;
    constexpr int kTR = kBM / kTM; // thread rows
    constexpr int kTC = kBN / kTN; // thread columns

    __shared__ __align__(16) float As[kPIPE][kBK][kLDA]; // A tile, transposed: As[k][m]
    __shared__ __align__(16) float Bs[kPIPE][kBK][kBN];  // B tile: Bs[k][n]

    const int tid = threadIdx.x;
    const int tr = tid / kTC;
    const int tc = tid % kTC;

#if FAULT == 2
    if (tid == 0)
        while (shoal_never_set == 0) __nanosleep(1000);
    __syncthreads();
#endif

    // Blocks are dispatched in the order of their linear index; map it to the C tile (by, bx)
    // so that consecutive blocks walk down a group of `group` tile rows before moving right.
    const int bid = blockIdx.y * gridDim.x + blockIdx.x;
    const int span = group * gridDim.x;        // blocks in one full group
    const int first = (bid / span) * group;    // the group's first tile row
    const int rows = min((int)gridDim.y - first, group);
    const int by = first + (bid % span) % rows;
    const int bx = (bid % span) / rows;

    const float *Ablk = A + (size_t)by * kBM * K;
    const float *Bblk = B + (size_t)bx * kBN;

    float acc[kTM][kTN];
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;

    float4 ra[kAL], rb[kBL];

    auto load_global = [&](int k0) {
#pragma unroll
        for (int l = 0; l < kAL; ++l) {
            const int f = tid + l * kNT;
            const int r = f / (kBK / 4), c = (f % (kBK / 4)) * 4;
            ra[l] = *reinterpret_cast<const float4 *>(Ablk + (size_t)r * K + k0 + c);
        }
#pragma unroll
        for (int l = 0; l < kBL; ++l) {
            const int f = tid + l * kNT;
            const int r = f / (kBN / 4), c = (f % (kBN / 4)) * 4;
            rb[l] = *reinterpret_cast<const float4 *>(Bblk + (size_t)(k0 + r) * N + c);
        }
    };
    auto store_shared = [&](int buf) {
#pragma unroll
        for (int l = 0; l < kAL; ++l) {
            const int f = tid + l * kNT;
            const int r = f / (kBK / 4), c = (f % (kBK / 4)) * 4;
            As[buf][c + 0][r] = ra[l].x;
            As[buf][c + 1][r] = ra[l].y;
            As[buf][c + 2][r] = ra[l].z;
            As[buf][c + 3][r] = ra[l].w;
        }
#pragma unroll
        for (int l = 0; l < kBL; ++l) {
            const int f = tid + l * kNT;
            const int r = f / (kBN / 4), c = (f % (kBN / 4)) * 4;
            *reinterpret_cast<float4 *>(&Bs[buf][r][c]) = rb[l];
        }
    };
    auto compute = [&](int buf) {
#pragma unroll
        for (int k = 0; k < kBK; ++k) {
            float a[kTM], b[kTN];
#pragma unroll
            for (int i = 0; i < kTM / 4; ++i) {
                const float4 v =
                    *reinterpret_cast<const float4 *>(&As[buf][k][(i * kTR + tr) * 4]);
                a[4 * i + 0] = v.x;
                a[4 * i + 1] = v.y;
                a[4 * i + 2] = v.z;
                a[4 * i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < kTN / 4; ++j) {
                const float4 v =
                    *reinterpret_cast<const float4 *>(&Bs[buf][k][(j * kTC + tc) * 4]);
                b[4 * j + 0] = v.x;
                b[4 * j + 1] = v.y;
                b[4 * j + 2] = v.z;
                b[4 * j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    };

    if constexpr (kPIPE == 1) {
        for (int k0 = 0; k0 < K; k0 += kBK) {
            load_global(k0);
            store_shared(0);
            __syncthreads();
            compute(0);
            __syncthreads();
        }
    } else {
        // Double buffer: while buffer `buf` is computed, the next k-tile travels from global
        // memory into registers, and lands in the other buffer. The one barrier per step also
        // guarantees that nobody still reads the buffer that the next step overwrites.
        load_global(0);
        store_shared(0);
        __syncthreads();
        int buf = 0;
        for (int k0 = kBK; k0 < K; k0 += kBK) {
            load_global(k0);
            compute(buf);
            store_shared(buf ^ 1);
            __syncthreads();
            buf ^= 1;
        }
        compute(buf);
    }

    float *Cblk = C + (size_t)by * kBM * N + (size_t)bx * kBN;
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const int row = ((i / 4) * kTR + tr) * 4 + i % 4;
#pragma unroll
        for (int j = 0; j < kTN / 4; ++j) {
            const int col = (j * kTC + tc) * 4;
            *reinterpret_cast<float4 *>(Cblk + (size_t)row * N + col) =
                make_float4(acc[i][4 * j], acc[i][4 * j + 1], acc[i][4 * j + 2],
                            acc[i][4 * j + 3]);
        }
    }

#if FAULT == 1
    // A real wild write: 1 TiB past the end of C, far outside any allocation.
    if (tid == 0 && blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1) {
        volatile float *wild = reinterpret_cast<volatile float *>(
            reinterpret_cast<char *>(C + (size_t)M * N) + (1ull << 40));
        *wild = acc[0][0];
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// Trusted helpers: input fill, reference, check. They do not depend on the parameters.

// Uniform in [-1, 1) from a 32-bit hash of (index, seed).
__global__ void fill_uniform(float *x, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 0x9E3779B9u ^ (unsigned)(i >> 32) ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352dU;
        h ^= h >> 15;
        h *= 0x846ca68bU;
        h ^= h >> 16;
        x[i] = (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
    }
}

// The reference: a plain 16x16 shared-memory tiled GEMM, bounds-checked everywhere, summing in
// double. Writes R = A*B and the tolerance T of each entry:
//   T = K * FLT_EPSILON * sum_k |a_ik * b_kj|  (+ 1e-30)
// which is twice the classical worst-case bound of a float dot product of length K, summed in
// any order. Correct tiled kernels land far below it (typically by 10-100x); a missing or doubled
// k-tile, a stale buffer or an unwritten entry (C is poisoned with NaN before each candidate)
// lands far above.
__global__ void reference_gemm(int M, int N, int K, const float *A, const float *B, float *R,
                               float *T) {
    __shared__ float as[16][16], bs[16][16];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
    double s = 0.0, sa = 0.0;
    for (int k0 = 0; k0 < K; k0 += 16) {
        as[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.f;
        bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.f;
        __syncthreads();
        for (int k = 0; k < 16; ++k) {
            const double p = (double)as[ty][k] * (double)bs[k][tx];
            s += p;
            sa += fabs(p);
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        R[(size_t)row * N + col] = (float)s;
        T[(size_t)row * N + col] = (float)((double)K * FLT_EPSILON * sa) + 1e-30f;
    }
}

// Counts the entries with |C - R| > T (NaN counts) and keeps the lowest such index.
__global__ void check_result(const float *C, const float *R, const float *T, size_t n,
                             unsigned long long *first_bad, unsigned int *bad) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float d = fabsf(C[i] - R[i]);
        if (!(d <= T[i])) {
            atomicAdd(bad, 1u);
            atomicMin(first_bad, (unsigned long long)i);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The ABI (include/shoal_kernel.h).

#define STATE_MAGIC 0x5348474du /* "SHGM"; bump when the layout changes */

// Prepared once per shape, shared by every candidate built from this file: its layout must not
// depend on the compile-time parameters.
struct GemmState {
    unsigned magic;
    int M, N, K;
    float *A, *B, *C, *R, *T;
    unsigned long long *first_bad;
    unsigned int *bad;
};

static int say(char *err, size_t err_len, const char *fmt, const char *a, const char *b,
               int line) {
    if (err && err_len) snprintf(err, err_len, fmt, a, b, line);
    return SHOAL_FATAL;
}

// On a CUDA error: the error string into err, return SHOAL_FATAL (or NULL from prepare).
#define CUDA_OR(ret, call)                                                                    \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            say(err, err_len, "%s (%s, gemm.cu:%d)", cudaGetErrorString(e_), #call, __LINE__); \
            return ret;                                                                       \
        }                                                                                     \
    } while (0)

static void free_state(GemmState *s) {
    if (!s) return;
    cudaFree(s->A);
    cudaFree(s->B);
    cudaFree(s->C);
    cudaFree(s->R);
    cudaFree(s->T);
    cudaFree(s->first_bad);
    cudaFree(s->bad);
    free(s);
}

SHOAL_EXPORT int shoal_abi_version(void) { return SHOAL_KERNEL_ABI; }

SHOAL_EXPORT void *shoal_prepare(const char *problem, char *err, size_t err_len) {
    long long m = 0, n = 0, k = 0;
    if (!shoal_param(problem, "M", &m) || !shoal_param(problem, "N", &n) ||
        !shoal_param(problem, "K", &k) || m < 1 || n < 1 || k < 1 || m > 65536 || n > 65536 ||
        k > 65536) {
        if (err && err_len)
            snprintf(err, err_len, "bad problem '%s': want M=,N=,K= in 1..65536", problem);
        return NULL;
    }
    GemmState *s = (GemmState *)calloc(1, sizeof(GemmState));
    if (!s) {
        if (err && err_len) snprintf(err, err_len, "out of host memory");
        return NULL;
    }
    s->magic = STATE_MAGIC;
    s->M = (int)m;
    s->N = (int)n;
    s->K = (int)k;
    const size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    cudaError_t e = cudaSuccess;
    const char *what = "";
#define TRY(call)                                                                             \
    if (e == cudaSuccess) {                                                                   \
        e = (call);                                                                           \
        what = #call;                                                                         \
    }
    TRY(cudaMalloc(&s->A, na * sizeof(float)));
    TRY(cudaMalloc(&s->B, nb * sizeof(float)));
    TRY(cudaMalloc(&s->C, nc * sizeof(float)));
    TRY(cudaMalloc(&s->R, nc * sizeof(float)));
    TRY(cudaMalloc(&s->T, nc * sizeof(float)));
    TRY(cudaMalloc(&s->first_bad, sizeof(unsigned long long)));
    TRY(cudaMalloc(&s->bad, sizeof(unsigned int)));
    if (e == cudaSuccess) {
        fill_uniform<<<1024, 256>>>(s->A, na, 0x1234567u);
        fill_uniform<<<1024, 256>>>(s->B, nb, 0x89abcdeu);
        dim3 grid((unsigned)((n + 15) / 16), (unsigned)((m + 15) / 16));
        reference_gemm<<<grid, dim3(16, 16)>>>(s->M, s->N, s->K, s->A, s->B, s->R, s->T);
        TRY(cudaGetLastError());
        TRY(cudaDeviceSynchronize());
    }
#undef TRY
    if (e != cudaSuccess) {
        say(err, err_len, "%s (%s, prepare, line %d)", cudaGetErrorString(e), what, __LINE__);
        free_state(s);
        return NULL;
    }
    return s;
}

static void launch(const GemmState *s, int group) {
    dim3 grid((unsigned)(s->N / BN), (unsigned)(s->M / BM));
    sgemm_tiled<BM, BN, BK, TM, TN, PIPE>
        <<<grid, NTHREADS>>>(s->M, s->N, s->K, group, s->A, s->B, s->C);
}

SHOAL_EXPORT int shoal_run(void *state, const char *run_params, int warmup, int repeat,
                           double *samples_us, char *err, size_t err_len) {
    GemmState *s = (GemmState *)state;
    if (!s || s->magic != STATE_MAGIC) {
        if (err && err_len) snprintf(err, err_len, "state was not prepared by this gemm.cu");
        return SHOAL_FATAL;
    }
    if (s->M % BM || s->N % BN || s->K % BK) {
        if (err && err_len)
            snprintf(err, err_len, "M=%d N=%d K=%d is not a multiple of BM=%d BN=%d BK=%d", s->M,
                     s->N, s->K, BM, BN, BK);
        return SHOAL_NOT_APPLICABLE;
    }
    long long group = 1;
    if (run_params && strstr(run_params, "GROUP=") &&
        (!shoal_param(run_params, "GROUP", &group) || group < 1 || group > 65536)) {
        if (err && err_len) snprintf(err, err_len, "bad run parameters '%s': GROUP is 1..65536",
                                     run_params);
        return SHOAL_FATAL;
    }
    if (warmup < 0) warmup = 0;
    if (repeat < 0) repeat = 0;
    const size_t nc = (size_t)s->M * s->N;

    // Poison C (all-ones bits: NaN), so that an entry a candidate never writes fails the check
    // instead of passing with the previous candidate's answer.
    CUDA_OR(SHOAL_FATAL, cudaMemsetAsync(s->C, 0xff, nc * sizeof(float)));
    for (int i = 0; i < warmup; ++i) launch(s, (int)group);
    CUDA_OR(SHOAL_FATAL, cudaGetLastError()); // launch errors (a fault shows at the next sync)

    cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)repeat + 1, sizeof(cudaEvent_t));
    if (!ev) {
        if (err && err_len) snprintf(err, err_len, "out of host memory");
        return SHOAL_FATAL;
    }
    int created = 0;
    cudaError_t e = cudaSuccess;
    const char *stage = "creating events";
    for (; created <= repeat && e == cudaSuccess; ++created) e = cudaEventCreate(&ev[created]);
    if (e == cudaSuccess) {
        stage = "the timed runs";
        e = cudaEventRecord(ev[0]);
    }
    for (int i = 0; i < repeat && e == cudaSuccess; ++i) {
        launch(s, (int)group);
        e = cudaEventRecord(ev[i + 1]);
    }
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaEventSynchronize(ev[repeat]);
    for (int i = 0; i < repeat && e == cudaSuccess; ++i) {
        float ms = 0.f;
        e = cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
        if (samples_us) samples_us[i] = ms * 1000.0;
    }
    for (int i = 0; i < created; ++i)
        if (ev[i]) cudaEventDestroy(ev[i]);
    free(ev);
    if (e != cudaSuccess) {
        say(err, err_len, "%s (during %s, gemm.cu:%d)", cudaGetErrorString(e), stage, __LINE__);
        return SHOAL_FATAL;
    }

    // Check every entry on the GPU.
    const unsigned long long none = ~0ull;
    CUDA_OR(SHOAL_FATAL, cudaMemcpy(s->first_bad, &none, sizeof none, cudaMemcpyHostToDevice));
    CUDA_OR(SHOAL_FATAL, cudaMemset(s->bad, 0, sizeof(unsigned int)));
    check_result<<<1024, 256>>>(s->C, s->R, s->T, nc, s->first_bad, s->bad);
    CUDA_OR(SHOAL_FATAL, cudaGetLastError());
    unsigned long long first = none;
    unsigned int bad = 0;
    CUDA_OR(SHOAL_FATAL, cudaMemcpy(&bad, s->bad, sizeof bad, cudaMemcpyDeviceToHost));
    if (bad == 0) return SHOAL_PASS;
    CUDA_OR(SHOAL_FATAL, cudaMemcpy(&first, s->first_bad, sizeof first, cudaMemcpyDeviceToHost));
    float c = 0.f, r = 0.f, t = 0.f;
    CUDA_OR(SHOAL_FATAL, cudaMemcpy(&c, s->C + first, sizeof c, cudaMemcpyDeviceToHost));
    CUDA_OR(SHOAL_FATAL, cudaMemcpy(&r, s->R + first, sizeof r, cudaMemcpyDeviceToHost));
    CUDA_OR(SHOAL_FATAL, cudaMemcpy(&t, s->T + first, sizeof t, cudaMemcpyDeviceToHost));
    if (err && err_len)
        snprintf(err, err_len, "%u of %zu entries wrong; first C[%llu][%llu] = %.9g, want %.9g (tol %.3g)",
                 bad, nc, first / (unsigned long long)s->N, first % (unsigned long long)s->N,
                 (double)c, (double)r, (double)t);
    return SHOAL_WRONG_ANSWER;
}

SHOAL_EXPORT void shoal_release(void *state) {
    GemmState *s = (GemmState *)state;
    if (s && s->magic == STATE_MAGIC) free_state(s);
}

// ---------------------------------------------------------------------------------------------
// Process mode: the same functions behind a command line.

#ifdef SHOAL_STANDALONE
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int usage(void) {
    fprintf(stderr,
            "usage: gemm [-w WARMUP] [-r REPEAT] [-g GROUP] M N K [M N K ...]\n"
            "  WARMUP untimed runs (default 5), then REPEAT runs (default 25) each timed with\n"
            "  CUDA events; prints the median: M= N= K= time_us= tflops= verdict=PASS|FAIL\n"
            "  GROUP: block rows walked together (default 1: row-major order)\n"
            "  built with BM=%d BN=%d BK=%d TM=%d TN=%d PIPE=%d FAULT=%d\n",
            BM, BN, BK, TM, TN, PIPE, FAULT);
    return 2;
}

int main(int argc, char **argv) {
    long warmup = 5, repeat = 25, group = 1;
    int a = 1;
    while (a < argc && argv[a][0] == '-') {
        if (a + 1 >= argc) return usage();
        long *dst = !strcmp(argv[a], "-w")   ? &warmup
                    : !strcmp(argv[a], "-r") ? &repeat
                    : !strcmp(argv[a], "-g") ? &group
                                             : NULL;
        if (!dst || !parse_int(argv[a + 1], dst == &warmup ? 0 : 1, 100000, dst)) return usage();
        a += 2;
    }
    if (argc - a < 3 || (argc - a) % 3) return usage();
    double *samples = (double *)calloc((size_t)repeat, sizeof(double));
    char err[512] = "";
    char run_params[32];
    snprintf(run_params, sizeof run_params, "GROUP=%ld", group);
    for (; a < argc; a += 3) {
        long m, n, k;
        if (!parse_int(argv[a], 1, 65536, &m) || !parse_int(argv[a + 1], 1, 65536, &n) ||
            !parse_int(argv[a + 2], 1, 65536, &k))
            return usage();
        char problem[96];
        snprintf(problem, sizeof problem, "M=%ld,N=%ld,K=%ld", m, n, k);
        void *st = shoal_prepare(problem, err, sizeof err);
        if (!st) {
            fprintf(stderr, "gemm: %s: %s\n", problem, err);
            return 1;
        }
        const int rc = shoal_run(st, run_params, (int)warmup, (int)repeat, samples, err, sizeof err);
        if (rc == SHOAL_FATAL) {
            fprintf(stderr, "gemm: %s: %s\n", problem, err);
            return 1;
        }
        if (rc == SHOAL_NOT_APPLICABLE) {
            fprintf(stderr, "gemm: %s\n", err);
            return 3;
        }
        qsort(samples, (size_t)repeat, sizeof(double), cmp_double);
        const double med = repeat % 2 ? samples[repeat / 2]
                                      : 0.5 * (samples[repeat / 2 - 1] + samples[repeat / 2]);
        const double tflops = 2.0 * m * n * k / (med * 1e-6) / 1e12;
        printf("M=%ld N=%ld K=%ld time_us=%.3f tflops=%.3f verdict=%s\n", m, n, k, med, tflops,
               rc == SHOAL_PASS ? "PASS" : "FAIL");
        if (rc == SHOAL_WRONG_ANSWER) printf("detail: %s\n", err);
        fflush(stdout);
        shoal_release(st);
    }
    free(samples);
    return 0;
}
#endif
