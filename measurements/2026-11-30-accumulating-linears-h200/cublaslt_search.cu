// Times every algorithm cuBLASLt's heuristic offers for the decoding step's products of the 3B
// decoder (Y[M, N] = X[M, K] W[N, K]^T, bf16 in and out, f32 accumulation) against cublasGemmEx's
// default, with the weights cycled over copies larger than the L2 cache (as in a decoding step, where
// each layer's weights are read once). Prints one line a shape and rows count: the default's
// microseconds, the best algorithm's, and its effective bandwidth over the weights.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                         \
  do {                                                                                   \
    auto st_ = (x);                                                                     \
    if (st_ != 0) { std::fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, (int)st_); \
      std::exit(1); }                                                                    \
  } while (0)

struct Shape { const char* name; int n, k; };

static const size_t kCycleBytes = 512ull << 20;  // weights cycled over: 10x the H200's 50 MB of L2
static const int kIters = 200;

// Mean microseconds of `iters` calls of f(copy), copies taken in turn.
template <class F>
float time_calls(int copies, F f) {
  for (int i = 0; i < 10; ++i) f(i % copies);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < kIters; ++i) f(i % copies);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1000.f / kIters;
}

int main() {
  const Shape shapes[] = {{"gate|up", 22016, 2048}, {"down", 2048, 11008}, {"q|k|v", 2560, 2048},
                          {"o", 2048, 2048}, {"head", 151936, 2048}};
  const int rows[] = {64, 256};
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  CHECK(cublasCreate(&blas));
  CHECK(cublasLtCreate(&lt));
  size_t ws_bytes = 64ull << 20;
  void* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  for (const Shape& s : shapes) {
    size_t w_bytes = (size_t)s.n * s.k * 2;
    int copies = std::max<size_t>(1, kCycleBytes / w_bytes + 1);
    std::vector<void*> w(copies);
    for (auto& p : w) { CHECK(cudaMalloc(&p, w_bytes)); CHECK(cudaMemset(p, 0, w_bytes)); }
    for (int m : rows) {
      void *x, *y;
      CHECK(cudaMalloc(&x, (size_t)m * s.k * 2));
      CHECK(cudaMalloc(&y, (size_t)m * s.n * 2));
      CHECK(cudaMemset(x, 0, (size_t)m * s.k * 2));
      float alpha = 1.f, beta = 0.f;
      // Column-major: Y^T (n x m) = W (k x n, transposed) * X^T (k x m).
      float plain = time_calls(copies, [&](int c) {
        CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, w[c], CUDA_R_16BF, s.k,
                           x, CUDA_R_16BF, s.k, &beta, y, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
      });
      cublasLtMatmulDesc_t op;
      CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
      CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
      CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
      cublasLtMatrixLayout_t la, lb, lc;
      CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.n, s.k));
      CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, m, s.k));
      CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, m, s.n));
      cublasLtMatmulPreference_t pref;
      CHECK(cublasLtMatmulPreferenceCreate(&pref));
      CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                 sizeof(ws_bytes)));
      cublasLtMatmulHeuristicResult_t found[64];
      int count = 0;
      CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 64, found, &count));
      float best = 1e30f, first = 0.f;
      int best_i = -1;
      for (int i = 0; i < count; ++i) {
        float us = time_calls(copies, [&](int c) {
          CHECK(cublasLtMatmul(lt, op, &alpha, w[c], la, x, lb, &beta, y, lc, y, lc, &found[i].algo, ws,
                               ws_bytes, 0));
        });
        if (i == 0) first = us;
        if (us < best) { best = us; best_i = i; }
      }
      std::printf("%-8s m=%3d n=%6d k=%5d: gemmEx %7.2f us, lt first %7.2f us, lt best %7.2f us (#%d of %d), "
                  "%.2f TB/s over the weights\n",
                  s.name, m, s.n, s.k, plain, first, best, best_i, count, w_bytes / (best * 1e-6) / 1e12);
      std::fflush(stdout);
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(op);
      cudaFree(x);
      cudaFree(y);
    }
    for (auto p : w) cudaFree(p);
  }
  return 0;
}
