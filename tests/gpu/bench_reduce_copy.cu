/* bench_reduce_copy: reduce_cuda.cuh's reduceCopy against cudaMemcpy
 * device-to-device on a real GPU (issue 14's figure: the sum of two float
 * inputs into one output, 256 MB per buffer, should move at least 90% of
 * the copy engine's bytes per second).
 *
 * Both are counted the same way, bytes read plus bytes written: a copy of
 * N bytes moves 2N, a two-input reduceCopy of N bytes moves 3N. The kernel
 * is the executor's own routine (gcoll_cuda_reduce_copy_f32_sum) run by
 * GCOLL_CUDA_THREADS threads per block over a grid of blocks, each block on
 * one contiguous slice, as the collective kernel runs one slice per
 * channel. The result is checked element by element against a serial sum
 * on the host (exact: small integers in float), so a fast wrong kernel
 * cannot pass. Prints one line per measurement and the ratio; exit 1 on a
 * wrong result, 77 without a GPU. A benchmark, not a timed test: nothing
 * fails on the ratio.
 *
 *   bench_reduce_copy [MB per buffer (256)] [iterations (20)] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_work.h"
#include "kernels/reduce.h"
#include "kernels/reduce_cuda.cuh"

GCOLL_CUDA_DEFINE_REDUCE_OP(f32, float, sum, gcollSum)
/* The host pass of nvcc sees the kernel's body stripped, so without this
 * the static routine looks unused there (-Werror). */
static gcoll_cuda_reduce_fn const reduce_f32_sum = GCOLL_CUDA_REDUCE_NAME(f32, sum);

__global__ void __launch_bounds__(GCOLL_CUDA_THREADS, 1)
    sum2(float *dst, const float *a, const float *b, size_t n) {
  size_t per = ((n + gridDim.x - 1) / gridDim.x + 3) & ~(size_t)3; /* 16-byte aligned slices */
  size_t lo = per * blockIdx.x;
  if (lo >= n) return;
  size_t len = n - lo < per ? n - lo : per;
  void *d[1] = {dst + lo};
  const void *s[2] = {a + lo, b + lo};
  GCOLL_CUDA_REDUCE_NAME(f32, sum)((int)threadIdx.x, (int)blockDim.x, d, 1, s, 2, len, NULL);
}

#define CK(call)                                                                \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) {                                                    \
      fprintf(stderr, "bench_reduce_copy: %s: %s\n", #call, cudaGetErrorString(e_)); \
      exit(e_ == cudaErrorNoDevice || e_ == cudaErrorInsufficientDriver ? 77 : 1); \
    }                                                                           \
  } while (0)

static float time_ms(cudaEvent_t t0, cudaEvent_t t1) {
  float ms = 0;
  CK(cudaEventSynchronize(t1));
  CK(cudaEventElapsedTime(&ms, t0, t1));
  return ms;
}

int main(int argc, char **argv) {
  size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  if (mb == 0 || iters < 1) {
    fprintf(stderr, "usage: bench_reduce_copy [MB per buffer] [iterations]\n");
    return 2;
  }
  size_t n = mb * 1000 * 1000 / sizeof(float), bytes = n * sizeof(float);
  (void)reduce_f32_sum;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  float *a, *b, *dst;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&dst, bytes));
  float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes), *hd = (float *)malloc(bytes);
  if (!ha || !hb || !hd) return 1;
  srand(14);
  for (size_t i = 0; i < n; i++) {
    ha[i] = (float)(rand() % 2048);
    hb[i] = (float)(rand() % 2048 - 1024);
  }
  CK(cudaMemcpy(a, ha, bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, hb, bytes, cudaMemcpyHostToDevice));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));

  /* cudaMemcpy device to device: the reference, warmed up first. */
  for (int i = 0; i < 3; i++) CK(cudaMemcpy(dst, a, bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(t0));
  for (int i = 0; i < iters; i++) CK(cudaMemcpyAsync(dst, a, bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(t1));
  double copy_gbs = 2.0 * bytes * iters / (time_ms(t0, t1) * 1e-3) / 1e9;
  printf("%-44s %9.1f GB/s (read+write)\n", "cudaMemcpy DtoD", copy_gbs);

  double best = 0;
  int best_blocks = 0;
  int grids[] = {prop.multiProcessorCount, 2 * prop.multiProcessorCount, 32, 16};
  for (int g = 0; g < 4; g++) {
    int blocks = grids[g];
    sum2<<<blocks, GCOLL_CUDA_THREADS>>>(dst, a, b, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(t0));
    for (int i = 0; i < iters; i++) sum2<<<blocks, GCOLL_CUDA_THREADS>>>(dst, a, b, n);
    CK(cudaEventRecord(t1));
    double gbs = 3.0 * bytes * iters / (time_ms(t0, t1) * 1e-3) / 1e9;
    CK(cudaMemcpy(hd, dst, bytes, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += hd[i] != ha[i] + hb[i];
    char name[64];
    snprintf(name, sizeof(name), "reduceCopy f32 sum, 2 inputs, %d blocks", blocks);
    printf("%-44s %9.1f GB/s (read+write)  %.1f%% of cudaMemcpy  %zu wrong\n", name, gbs,
           100.0 * gbs / copy_gbs, wrong);
    if (wrong) return 1;
    if (gbs > best) best = gbs, best_blocks = blocks;
  }
  printf("# %s, %zu MB per buffer, %d iterations: reduceCopy best %.1f%% of cudaMemcpy "
         "(%d blocks of %d threads)\n",
         prop.name, mb, iters, 100.0 * best / copy_gbs, best_blocks, GCOLL_CUDA_THREADS);
  return 0;
}
