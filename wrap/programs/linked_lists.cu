// Linked lists built on the host, one managed allocation per node, traversed on the GPU.
#include "common.h"

struct Node {
  Node *next;
  unsigned long long value;
};

__global__ void walk(Node **heads, int lists, unsigned long long *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= lists) return;
  unsigned long long s = 0;
  for (Node *n = heads[i]; n; n = n->next) s = s * 31 + n->value;
  out[i] = s;
}

int main() {
  const int lists = 512, length = 64;
  Node **heads;
  unsigned long long *out;
  CHECK(cudaMallocManaged(&heads, lists * sizeof(Node *)));
  CHECK(cudaMallocManaged(&out, lists * sizeof *out));
  double t0 = now_ms();
  for (int l = 0; l < lists; l++) {
    heads[l] = nullptr;
    for (int k = 0; k < length; k++) {
      Node *n;
      CHECK(cudaMallocManaged(&n, sizeof *n));
      n->value = (unsigned long long)l * 1000003 + k;
      n->next = heads[l];
      heads[l] = n;
    }
  }
  double build_ms = now_ms() - t0;
  float k = kernel_ms([&] { walk<<<(lists + 127) / 128, 128>>>(heads, lists, out); });
  unsigned long long x = 0;
  for (int l = 0; l < lists; l++) x ^= out[l] + l;
  std::printf("lists %d checksum %llu\n", lists, x);
  for (int l = 0; l < lists; l++)
    for (Node *n = heads[l]; n;) {
      Node *next = n->next;
      CHECK(cudaFree(n));
      n = next;
    }
  std::printf("time build_ms %.3f kernel_ms %.3f\n", build_ms, k);
  return 0;
}
