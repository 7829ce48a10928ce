// The minimal alignmalloc program: create a runtime, bind it, let every thread of a kernel
// allocate with am::malloc and fill its object, check every word on the host and on the device,
// free everything. Also shows what a kernel gets before anything is bound (a null result and
// kStatusUnbound, at once) and the explicit-mailbox form.
//
//   nvcc -arch=sm_90 minimal.cu $(pkg-config --cflags --libs alignmalloc) -o minimal
#include <alignmalloc/alignmalloc.cuh>

#include <cstring>
#include <vector>

#include "check.h"

// Words of thread t's object, by warp so that each warp asks one size class: small (512 B),
// portion (4.8 KB) and large (40 KB).
__host__ __device__ inline unsigned words_of(unsigned t) {
  const unsigned words[3] = {64, 600, 5000};
  return words[(t / 32) % 3];
}

__host__ __device__ inline unsigned long long value_of(unsigned t, unsigned i) {
  return (unsigned long long)t * 1000003ull + i;
}

// Every thread allocates its object through the default mailbox and fills it.
__global__ void fill(unsigned long long* handles, unsigned* statuses, unsigned threads) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  unsigned status;
  am::ptr<unsigned long long> p{am::malloc(words_of(t) * 8ull, &status)};
  handles[t] = p.handle;
  statuses[t] = status;
  if (p.is_null()) return;
  for (unsigned i = 0; i < words_of(t); ++i) p[i] = value_of(t, i);
}

// Every thread checks its object through a read-only view and frees it; counts what is wrong.
__global__ void check_and_free(const unsigned long long* handles, unsigned threads,
                               unsigned long long* wrong) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  am::ptr<const unsigned long long> p{handles[t]};
  unsigned long long bad = 0;
  for (unsigned i = 0; i < words_of(t); ++i) bad += p[i] != value_of(t, i);
  const am::FreeResult freed = am::free(p.handle);
  bad += freed.lane_status != am::kLaneOk;
  if (bad) atomicAdd(wrong, bad);
}

// The same allocation through a mailbox passed as an argument.
__global__ void explicit_mailbox(am::DeviceMailbox mb, unsigned* statuses, unsigned threads) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  unsigned status;
  const am::u64 h = am::malloc(mb, 256, &status);
  statuses[t] = status;
  if (h != 0) statuses[t] += 100 * am::free(mb, h).lane_status;
}

int main() {
  const unsigned threads = 16384, block = 256, blocks = threads / block;
  unsigned long long *handles, *wrong;
  unsigned* statuses;
  CHECK_CUDA(cudaMalloc(&handles, threads * sizeof(*handles)));
  CHECK_CUDA(cudaMalloc(&statuses, threads * sizeof(*statuses)));
  CHECK_CUDA(cudaMallocManaged(&wrong, sizeof(*wrong)));
  std::vector<unsigned long long> h(threads);
  std::vector<unsigned> s(threads);

  // Before any runtime is bound: null handles and kStatusUnbound, never a hang.
  fill<<<blocks, block>>>(handles, statuses, threads);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaMemcpy(h.data(), handles, threads * 8, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(s.data(), statuses, threads * 4, cudaMemcpyDeviceToHost));
  for (unsigned t = 0; t < threads; ++t) {
    EXPECT(h[t] == 0 && s[t] == am::kStatusUnbound, "thread %u unbound: %llx %u", t, h[t], s[t]);
  }
  std::printf("before binding: %u threads got null and kStatusUnbound\n", threads);

  am_runtime* rt = create_gpu_runtime(1ull << 30);
  CHECK_AM(am::bind(rt));

  fill<<<blocks, block>>>(handles, statuses, threads);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaMemcpy(h.data(), handles, threads * 8, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(s.data(), statuses, threads * 4, cudaMemcpyDeviceToHost));
  // The host reads every object back through the C API (it follows the layout).
  std::vector<unsigned long long> words(5000);
  unsigned long long checked = 0;
  for (unsigned t = 0; t < threads; ++t) {
    EXPECT(s[t] == am::kStatusOk && h[t] != 0, "thread %u: status %u", t, s[t]);
    CHECK_AM(am_read(rt, h[t], 0, words.data(), words_of(t) * 8ull));
    for (unsigned i = 0; i < words_of(t); ++i) {
      EXPECT(words[i] == value_of(t, i), "thread %u word %u: %llu", t, i, words[i]);
    }
    checked += words_of(t);
  }
  std::printf("host read %llu words of %u objects: all as written\n", checked, threads);

  *wrong = 0;
  check_and_free<<<blocks, block>>>(handles, threads, wrong);
  CHECK_LAUNCH();
  EXPECT(*wrong == 0, "%llu words or frees were wrong on the device", *wrong);
  expect_clean(rt);
  std::printf("device checked and freed every object; nothing left allocated\n");

  am_device_mailbox mailbox;
  CHECK_AM(am_runtime_device_mailbox(rt, &mailbox));
  am::DeviceMailbox mb;
  static_assert(sizeof mb == sizeof mailbox, "the C and C++ mailboxes agree");
  std::memcpy(&mb, &mailbox, sizeof mb);
  explicit_mailbox<<<blocks, block>>>(mb, statuses, threads);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaMemcpy(s.data(), statuses, threads * 4, cudaMemcpyDeviceToHost));
  for (unsigned t = 0; t < threads; ++t) EXPECT(s[t] == 0, "thread %u: %u", t, s[t]);
  expect_clean(rt);
  std::printf("explicit mailbox: %u allocations and frees\n", threads);

  am_counters counters;
  CHECK_AM(am_counters_get(rt, &counters));
  std::printf("counters: %llu requests ok, %llu objects freed, chunks small/portion/large "
              "%llu/%llu/%llu\n",
              (unsigned long long)counters.by_status[0], (unsigned long long)counters.lanes_freed,
              (unsigned long long)counters.chunks_by_class[0],
              (unsigned long long)counters.chunks_by_class[1],
              (unsigned long long)counters.chunks_by_class[2]);
  EXPECT(counters.lanes_freed == 2ull * threads, "%llu freed",
         (unsigned long long)counters.lanes_freed);

  CHECK_AM(am_runtime_destroy(rt));
  // Destroying the bound runtime unbinds it: kernels get kStatusUnbound again.
  fill<<<blocks, block>>>(handles, statuses, threads);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaMemcpy(s.data(), statuses, threads * 4, cudaMemcpyDeviceToHost));
  for (unsigned t = 0; t < threads; ++t) EXPECT(s[t] == am::kStatusUnbound, "thread %u", t);
  std::printf("after destroy: unbound again\nminimal: OK\n");
  CHECK_CUDA(cudaFree(handles));
  CHECK_CUDA(cudaFree(statuses));
  CHECK_CUDA(cudaFree(wrong));
  return 0;
}
