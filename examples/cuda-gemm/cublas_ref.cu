// cublas_ref.cu: cuBLAS SGEMM (fp32, no TF32: the default math mode) on the same row-major
// problem as gemm.cu, timed the same way: WARMUP untimed calls, then REPEAT calls each between
// two CUDA events, the median reported.
//
//   nvcc -O3 -arch=sm_90 -o cublas_ref cublas_ref.cu -lcublas
//   ./cublas_ref [-w WARMUP] [-r REPEAT] M N K [M N K ...]
//   -> M=<m> N=<n> K=<k> time_us=<median> tflops=<rate>     (one line per shape)
//
// Row-major C = A*B is column-major C^T = B^T * A^T: cuBLAS gets (B, A) with n and m swapped.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "cublas_ref: %s: %s\n", #call, cudaGetErrorString(e_));           \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
#define CB(call)                                                                              \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            fprintf(stderr, "cublas_ref: %s: status %d\n", #call, (int)s_);                  \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

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

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage(void) {
    fprintf(stderr, "usage: cublas_ref [-w WARMUP] [-r REPEAT] M N K [M N K ...]\n");
    return 2;
}

int main(int argc, char **argv) {
    int warmup = 5, repeat = 25, a = 1;
    while (a + 1 < argc && argv[a][0] == '-') {
        if (!strcmp(argv[a], "-w")) warmup = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-r")) repeat = atoi(argv[a + 1]);
        else return usage();
        a += 2;
    }
    if (argc - a < 3 || (argc - a) % 3 || warmup < 0 || repeat < 1) return usage();
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH)); // plain fp32 FMA, no TF32 tensor cores
    double *samples = (double *)calloc(repeat, sizeof(double));
    cudaEvent_t *ev = (cudaEvent_t *)calloc(repeat + 1, sizeof(cudaEvent_t));
    for (int i = 0; i <= repeat; ++i) CK(cudaEventCreate(&ev[i]));
    for (; a < argc; a += 3) {
        const int m = atoi(argv[a]), n = atoi(argv[a + 1]), k = atoi(argv[a + 2]);
        if (m < 1 || n < 1 || k < 1) return usage();
        float *A, *B, *C;
        CK(cudaMalloc(&A, (size_t)m * k * sizeof(float)));
        CK(cudaMalloc(&B, (size_t)k * n * sizeof(float)));
        CK(cudaMalloc(&C, (size_t)m * n * sizeof(float)));
        fill_uniform<<<1024, 256>>>(A, (size_t)m * k, 0x1234567u);
        fill_uniform<<<1024, 256>>>(B, (size_t)k * n, 0x89abcdeu);
        CK(cudaGetLastError());
        const float alpha = 1.f, beta = 0.f;
        auto call = [&] {
            CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, B, n, A, k, &beta, C,
                           n));
        };
        for (int i = 0; i < warmup; ++i) call();
        CK(cudaEventRecord(ev[0]));
        for (int i = 0; i < repeat; ++i) {
            call();
            CK(cudaEventRecord(ev[i + 1]));
        }
        CK(cudaEventSynchronize(ev[repeat]));
        for (int i = 0; i < repeat; ++i) {
            float ms;
            CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
            samples[i] = ms * 1000.0;
        }
        qsort(samples, repeat, sizeof(double), cmp_double);
        const double med = repeat % 2 ? samples[repeat / 2]
                                      : 0.5 * (samples[repeat / 2 - 1] + samples[repeat / 2]);
        printf("M=%d N=%d K=%d time_us=%.3f tflops=%.3f\n", m, n, k, med,
               2.0 * m * n * k / (med * 1e-6) / 1e12);
        fflush(stdout);
        CK(cudaFree(A));
        CK(cudaFree(B));
        CK(cudaFree(C));
    }
    CB(cublasDestroy(h));
    return 0;
}
