// How many clusters of a kernel shaped like the cluster attention kernel (160 threads, one block an SM
// by its shared memory) an H200 keeps active at once.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void __launch_bounds__(160, 1) dummy(int* p) { extern __shared__ int s[]; if (p) p[0] = s[0]; }
int main() {
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("SMs %d\n", sms);
  for (int smem : {177 * 1024 + 0, 146 * 1024, 113 * 1024, 81 * 1024, 64 * 1024}) {
    cudaFuncSetAttribute(dummy, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncSetAttribute(dummy, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    int per_sm = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dummy, 160, smem);
    printf("smem %6d B: blocks/SM %d;", smem, per_sm);
    for (int c : {1, 2, 4, 6, 8, 16}) {
      cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension;
      a[0].val.clusterDim.x = c; a[0].val.clusterDim.y = 1; a[0].val.clusterDim.z = 1;
      cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(c * 16, 1, 1); cfg.blockDim = dim3(160);
      cfg.dynamicSmemBytes = smem; cfg.attrs = a; cfg.numAttrs = 1;
      int n = -1; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, dummy, &cfg);
      printf(" c%d:%d%s", c, n, e ? "(err)" : "");
    }
    printf("\n");
  }
}
