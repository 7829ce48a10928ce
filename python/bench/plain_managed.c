/* The baseline a PyTorch user writes for managed memory: a pluggable allocator that calls
 * cudaMallocManaged and cudaFree for every tensor (no pool). Built on the GPU machine:
 *   cc -shared -fPIC -O2 plain_managed.c -I$CUDA/include -L$CUDA/lib64 -lcudart -o plain_managed.so */
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <sys/types.h>

void *plain_managed_alloc(ssize_t size, int device, cudaStream_t stream) {
  (void)device;
  (void)stream;
  void *p = NULL;
  if (cudaMallocManaged(&p, (size_t)size, cudaMemAttachGlobal) != cudaSuccess) return NULL;
  return p;
}

void plain_managed_free(void *p, ssize_t size, int device, cudaStream_t stream) {
  (void)size;
  (void)device;
  (void)stream;
  cudaFree(p);
}
