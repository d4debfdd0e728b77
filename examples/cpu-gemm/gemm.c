/*
 * cpu-gemm: single-precision matrix multiply C = A * B (row-major), the
 * example kernel tuned by Shoal.
 *
 *   A is M x K, B is K x N, C is M x N, all row-major and dense.
 *
 * Compile-time tunables (pass as -DNAME=value):
 *   BM      rows of C per cache tile                      (>= 1)
 *   BN      columns of C per cache tile                   (>= 1)
 *   BK      depth (K extent) of one cache tile            (>= 1)
 *   UNROLL  k-unroll factor of the micro-kernel            (1..16)
 *   ORDER   loop order inside a tile:
 *             0 = i-j-k dot products, B read with stride N (scalar)
 *             1 = i-k-j streaming rows of B (vectorises over j)
 *             2 = like 1, but the B tile is first packed into a
 *                 contiguous BK x BN buffer
 *
 * Usage: gemm M N K [REPS]
 *   Runs the kernel once untimed (warm-up), then times back-to-back calls
 *   with CLOCK_MONOTONIC and prints `time_us=<per call>`: REPS calls if
 *   given, otherwise the fastest of 5 batches of calls, each as many calls
 *   as it takes to reach 1 ms (at least one): a batch another process
 *   interrupted is slower, so on a shared machine the fastest is the
 *   kernel's own time.
 *   Then checks 256 sampled entries, the four corners and 8 more on each of
 *   the last row and column against a double-precision reference and prints
 *   `verdict=PASS max_err=...` or `verdict=FAIL max_err=...`.
 *   Exit code: 0 for PASS and FAIL alike; 2 on bad arguments (with a usage
 *   message); 1 if memory cannot be allocated.
 */
#define _POSIX_C_SOURCE 199309L

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Timed batches when REPS is not given (see the usage above). */
#define BATCHES 5

#ifndef BM
#define BM 32
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 128
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef ORDER
#define ORDER 2
#endif

#if BM < 1 || BN < 1 || BK < 1
#error "BM, BN and BK must be >= 1"
#endif
#if BM > 4096 || BN > 4096 || BK > 4096 || BK * BN > (1 << 22)
#error "BM, BN, BK must be <= 4096 and BK*BN <= 4M"
#endif
#if UNROLL < 1 || UNROLL > 16
#error "UNROLL must be in 1..16"
#endif
#if ORDER < 0 || ORDER > 2
#error "ORDER must be 0, 1 or 2"
#endif

#define SHOAL_PRAGMA_(x) _Pragma(#x)
#define UNROLL_PRAGMA(n) SHOAL_PRAGMA_(GCC unroll n)

/* Upper limit on M, N, K so that every size computation below fits easily. */
#define MAX_DIM 16384L

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/*
 * ORDER 0: dot-product order.  For each (i, j) of the tile, accumulate the
 * kb-long dot product of a row of A and a (strided) column of B, using UNROLL
 * independent partial sums.
 */
static inline void tile_ijk(size_t mb, size_t nb, size_t kb,
                            const float *restrict A, size_t lda,
                            const float *restrict B, size_t ldb,
                            float *restrict C, size_t ldc)
{
    const size_t kfull = kb - kb % UNROLL; /* k's handled UNROLL at a time */
    for (size_t i = 0; i < mb; i++) {
        const float *restrict Ai = A + i * lda;
        for (size_t j = 0; j < nb; j++) {
            const float *restrict Bj = B + j;
            float s[UNROLL];
            UNROLL_PRAGMA(16)
            for (int u = 0; u < UNROLL; u++) s[u] = 0.0f;
            for (size_t k = 0; k < kfull; k += UNROLL) {
                UNROLL_PRAGMA(16)
                for (int u = 0; u < UNROLL; u++)
                    s[u] += Ai[k + (size_t)u] * Bj[(k + (size_t)u) * ldb];
            }
            for (size_t k = kfull; k < kb; k++) s[0] += Ai[k] * Bj[k * ldb];
            float t = 0.0f;
            UNROLL_PRAGMA(16)
            for (int u = 0; u < UNROLL; u++) t += s[u];
            C[i * ldc + j] += t;
        }
    }
}

/*
 * ORDER 1 / 2: streaming order.  For each row i of the tile and each group of
 * UNROLL k's, add a rank-UNROLL update a[i][k..k+U) * B[k..k+U)[0..nb) to the
 * C row.  The j loop is contiguous in C and B and vectorises; UNROLL divides
 * the load/store traffic on the C row.
 *
 * `nb` is passed as the compile-time constant BN whenever the tile is full in
 * the j direction (see gemm), which gives the compiler a fixed trip count to
 * vectorise; column-edge tiles run with a runtime trip count (at -O2 GCC then
 * keeps the j loop scalar, so BN that divides N matters).
 */
static inline void tile_ikj(size_t mb, size_t nb, size_t kb,
                            const float *restrict A, size_t lda,
                            const float *restrict B, size_t ldb,
                            float *restrict C, size_t ldc)
{
    const size_t kfull = kb - kb % UNROLL; /* k's handled UNROLL at a time */
    for (size_t i = 0; i < mb; i++) {
        const float *restrict Ai = A + i * lda;
        float *restrict Ci = C + i * ldc;
        for (size_t k = 0; k < kfull; k += UNROLL) {
            float a[UNROLL];
            UNROLL_PRAGMA(16)
            for (int u = 0; u < UNROLL; u++) a[u] = Ai[k + (size_t)u];
            const float *restrict Bk = B + k * ldb;
            for (size_t j = 0; j < nb; j++) {
                float c = Ci[j];
                UNROLL_PRAGMA(16)
                for (int u = 0; u < UNROLL; u++) c += a[u] * Bk[(size_t)u * ldb + j];
                Ci[j] = c;
            }
        }
        for (size_t k = kfull; k < kb; k++) {
            const float a0 = Ai[k];
            const float *restrict Bk = B + k * ldb;
            for (size_t j = 0; j < nb; j++) Ci[j] += a0 * Bk[j];
        }
    }
}

/* Copy the kb x nb tile of B at Bsrc (leading dimension ldb) into Bp with
 * leading dimension BN. */
static inline void pack_b(size_t nb, size_t kb, const float *restrict Bsrc, size_t ldb,
                          float *restrict Bp)
{
    for (size_t k = 0; k < kb; k++)
        memcpy(Bp + k * (size_t)BN, Bsrc + k * ldb, nb * sizeof(float));
}

/*
 * C = A * B.  Bp is a workspace of BK*BN floats (used by ORDER 2 only).
 * Tiles are walked j0 (columns), k0 (depth), i0 (rows), so that one B tile is
 * reused for the whole column of C tiles.  Edge tiles (shapes that are not
 * multiples of the tile sizes) take the same code with runtime extents.
 */
__attribute__((noinline))
static void gemm(size_t M, size_t N, size_t K,
                 const float *restrict A, const float *restrict B,
                 float *restrict C, float *restrict Bp)
{
    memset(C, 0, M * N * sizeof(float));
    for (size_t j0 = 0; j0 < N; j0 += BN) {
        const size_t nb = min_sz((size_t)BN, N - j0);
        for (size_t k0 = 0; k0 < K; k0 += BK) {
            const size_t kb = min_sz((size_t)BK, K - k0);
            const float *Bt = B + k0 * N + j0;
#if ORDER == 2
            pack_b(nb, kb, Bt, N, Bp);
            Bt = Bp;
            const size_t ldb = BN;
#else
            (void)Bp;
            const size_t ldb = N;
#endif
            for (size_t i0 = 0; i0 < M; i0 += BM) {
                const size_t mb = min_sz((size_t)BM, M - i0);
                const float *At = A + i0 * K + k0;
                float *Ct = C + i0 * N + j0;
#if ORDER == 0
                if (mb == BM && nb == BN && kb == BK)
                    tile_ijk(BM, BN, BK, At, K, Bt, ldb, Ct, N);
                else
                    tile_ijk(mb, nb, kb, At, K, Bt, ldb, Ct, N);
#else
                if (nb == BN)
                    tile_ikj(mb, BN, kb, At, K, Bt, ldb, Ct, N);
                else
                    tile_ikj(mb, nb, kb, At, K, Bt, ldb, Ct, N);
#endif
            }
        }
    }
}

/* ---------------------------------------------------------------- driver */

static uint64_t rng_state;

static uint32_t rng_next(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}

/* Uniform in [-1, 1). */
static float rng_float(void) { return (float)((double)rng_next() / 2147483648.0 - 1.0); }

static int parse_dim(const char *s, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1 || v > max) return -1;
    *out = v;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *alloc_floats(size_t n)
{
    size_t bytes = n * sizeof(float);
    bytes = (bytes + 63) / 64 * 64; /* aligned_alloc wants a multiple of the alignment */
    if (bytes == 0) bytes = 64;
    return aligned_alloc(64, bytes);
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s M N K [REPS]\n"
            "  M, N, K: matrix sizes, 1..%ld (C[MxN] = A[MxK] * B[KxN])\n"
            "  REPS:    timed calls, 1..1000000 (default: the fastest of 5 batches of >= 1 ms)\n",
            prog, MAX_DIM);
}

int main(int argc, char **argv)
{
    long M, N, K, reps = 0;
    if (argc < 4 || argc > 5 || parse_dim(argv[1], MAX_DIM, &M) || parse_dim(argv[2], MAX_DIM, &N) ||
        parse_dim(argv[3], MAX_DIM, &K) || (argc == 5 && parse_dim(argv[4], 1000000L, &reps))) {
        usage(argc > 0 ? argv[0] : "gemm");
        return 2;
    }
    const size_t m = (size_t)M, n = (size_t)N, k = (size_t)K;

    float *A = alloc_floats(m * k), *B = alloc_floats(k * n), *C = alloc_floats(m * n);
    float *Bp = alloc_floats((size_t)BK * (size_t)BN);
    if (!A || !B || !C || !Bp) {
        fprintf(stderr, "gemm: out of memory\n");
        return 1;
    }
    rng_state = 0x9E3779B97F4A7C15ULL;
    for (size_t x = 0; x < m * k; x++) A[x] = rng_float();
    for (size_t x = 0; x < k * n; x++) B[x] = rng_float();

    /* Untimed warm-up call (caches, page faults). */
    gemm(m, n, k, A, B, C, Bp);

    double elapsed;
    if (reps > 0) {
        /* Fixed number of timed calls. */
        const double t0 = now_s();
        for (long r = 0; r < reps; r++) gemm(m, n, k, A, B, C, Bp);
        elapsed = now_s() - t0;
    } else {
        /* BATCHES batches of back-to-back calls, each until it has run >= 1 ms; the fastest
         * batch counts. On a shared machine a batch that another process interrupted is
         * slower, never faster, so the fastest one is the kernel's own time. */
        double best = DBL_MAX;
        long best_reps = 1;
        for (int b = 0; b < BATCHES; b++) {
            long calls = 0;
            double took;
            const double t0 = now_s();
            do {
                gemm(m, n, k, A, B, C, Bp);
                calls++;
                took = now_s() - t0;
            } while (took < 1e-3 && calls < 1000000L);
            if (took / (double)calls < best / (double)best_reps) {
                best = took;
                best_reps = calls;
            }
        }
        elapsed = best;
        reps = best_reps;
    }
    printf("time_us=%.3f\n", elapsed / (double)reps * 1e6);
    printf("reps=%ld gflops=%.3f\n", reps, 2.0 * (double)m * (double)n * (double)k * (double)reps / elapsed * 1e-9);

    /* Check sampled entries against a double-precision reference. */
    const double tol = fmax(1e-4, 4.0 * (double)K * FLT_EPSILON);
    double max_err = 0.0;
    long bad = 0, checked = 0;
    enum { NRAND = 256, NEDGE = 8 };
    for (int s = 0; s < 4 + NRAND + 2 * NEDGE; s++) {
        size_t i, j;
        if (s < 4) { /* the four corners */
            i = (s & 1) ? m - 1 : 0;
            j = (s & 2) ? n - 1 : 0;
        } else if (s < 4 + NRAND) { /* random entries */
            i = rng_next() % m;
            j = rng_next() % n;
        } else if (s < 4 + NRAND + NEDGE) { /* last row */
            i = m - 1;
            j = rng_next() % n;
        } else { /* last column */
            i = rng_next() % m;
            j = n - 1;
        }
        double ref = 0.0, mag = 0.0;
        for (size_t p = 0; p < k; p++) {
            double prod = (double)A[i * k + p] * (double)B[p * n + j];
            ref += prod;
            mag += fabs(prod);
        }
        double err = fabs((double)C[i * n + j] - ref) / (mag > 1e-30 ? mag : 1e-30);
        checked++;
        if (!(err <= tol)) { /* also catches NaN */
            bad++;
            if (!(err <= max_err)) max_err = err;
        } else if (err > max_err) {
            max_err = err;
        }
    }
    if (bad == 0)
        printf("verdict=PASS max_err=%.3e checked=%ld\n", max_err, checked);
    else
        printf("verdict=FAIL max_err=%.3e bad=%ld checked=%ld tol=%.1e\n", max_err, bad, checked, tol);

    free(A);
    free(B);
    free(C);
    free(Bp);
    return 0;
}
