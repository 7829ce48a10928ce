// am_bind, am_runtime_destroy and am_runtime_create racing on one device while kernels allocate
// through the default mailbox. Each host thread, in a loop: creates a runtime and shares it,
// binds runtimes of any thread (its own or another's, which that thread may be destroying at the
// same moment, or have destroyed) again and again, launches a kernel that takes whatever the default mailbox names
// at its start and allocates, fills and frees through it, then destroys its runtime and checks
// that the device's default mailbox no longer names it. At the end nothing is bound. A bind that
// lost a race to a destroy would leave the units naming a released mailbox: a kernel that fails,
// a hang, or the check below.
//
//   nvcc -arch=sm_90 -std=c++17 bind_race.cu $(pkg-config --cflags --libs alignmalloc) -o bind_race
//   bind_race [THREADS] [ROUNDS] [BINDS]
#include <alignmalloc/alignmalloc.cuh>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "../../../device/examples/check.h"

// Every lane allocates 256 B through the mailbox the kernel read once at its start, fills,
// checks and frees it; counts lanes by outcome (ok, unbound, anything else).
__global__ void churn(unsigned long long* outcomes) {
  const am::DeviceMailbox mb = am::default_mailbox();
  unsigned status = 0;
  const am::u64 h = am::malloc(mb, 256, &status);
  unsigned outcome = 2;
  if (h != 0) {
    am::ptr<unsigned> p{h};
    for (unsigned i = 0; i < 64; ++i) p[i] = threadIdx.x + i;
    bool same = true;
    for (unsigned i = 0; i < 64; ++i) same &= p[i] == threadIdx.x + i;
    outcome = same && am::free(mb, h).lane_status == am::kLaneOk ? 0 : 2;
  } else if (status == am::kStatusUnbound) {
    outcome = 1;
  }
  atomicAdd(&outcomes[outcome], 1ull);
}

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? std::atoi(argv[1]) : 8;
  const unsigned rounds = argc > 2 ? std::atoi(argv[2]) : 25;
  const unsigned binds = argc > 3 ? std::atoi(argv[3]) : 50;
  unsigned long long* outcomes;
  CHECK_CUDA(cudaMallocManaged(&outcomes, 3 * sizeof(*outcomes)));
  std::memset(outcomes, 0, 3 * sizeof(*outcomes));
  CHECK_CUDA(cudaFree(nullptr));
  // Each thread's current runtime (null between rounds), bound by any thread.
  std::vector<std::atomic<am_runtime*>> shared(threads);
  for (auto& s : shared) s.store(nullptr);
  // Creates and destroys, one at a time: a mailbox address seen right after a destroy is then
  // the destroyed runtime's, not a new one's at the same address.
  std::mutex lifecycle;
  std::atomic<unsigned long long> still_named{0}, binds_ok{0}, binds_refused{0}, own_refused{0};
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      unsigned long long rng = 0x9E3779B97F4A7C15ull * (w + 1);
      for (unsigned r = 0; r < rounds; ++r) {
        am_runtime* rt = nullptr;
        am_device_mailbox mine;
        {
          std::lock_guard<std::mutex> hold(lifecycle);
          am_options options;
          CHECK_AM(am_options_default(&options));
          options.backend = AM_BACKEND_CUDA;
          options.arena_bytes = 64ull << 20;
          CHECK_AM(am_runtime_create(&options, &rt));
          CHECK_AM(am_runtime_device_mailbox(rt, &mine));
        }
        shared[w].store(rt);
        for (unsigned b = 0; b < binds; ++b) {
          rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
          am_runtime* other = shared[rng % threads].load();
          if (other == nullptr) other = rt;  // that thread is between runtimes
          const am_status st = am::bind(other);
          if (st == AM_OK) {
            binds_ok++;
          } else {
            EXPECT(st == AM_ERR_INVALID_RUNTIME, "bind: %s", am_status_name(st));
            binds_refused++;
          }
        }
        churn<<<8, 128>>>(outcomes);
        CHECK_CUDA(cudaGetLastError());
        {
          // Destroyed while other threads may still be binding it (its token stays shared
          // until after the check: binding a destroyed runtime is refused with a status).
          std::lock_guard<std::mutex> hold(lifecycle);
          CHECK_AM(am_runtime_destroy(rt));
          // The default mailbox may name another runtime or none, never the destroyed one.
          am_device_mailbox named;
          CHECK_CUDA(cudaMemcpyFromSymbol(&named, ALIGNMALLOC_DEFAULT_MAILBOX, sizeof named));
          if (named.ports != 0 && named.req_seq == mine.req_seq) still_named++;
        }
        shared[w].store(nullptr);
        if (am::bind(rt) == AM_ERR_INVALID_RUNTIME) own_refused++;
      }
    });
  }
  for (auto& t : workers) t.join();
  CHECK_CUDA(cudaDeviceSynchronize());
  am_device_mailbox named;
  CHECK_CUDA(cudaMemcpyFromSymbol(&named, ALIGNMALLOC_DEFAULT_MAILBOX, sizeof named));
  const unsigned long long lanes = 8ull * 128 * threads * rounds;
  std::printf("bind_race: %u threads x %u rounds x %u binds: binds ok %llu, refused (destroyed) "
              "%llu; lanes ok %llu, unbound %llu, other %llu; destroyed runtimes still named "
              "%llu; own binds after destroy refused %llu of %u; bound at the end: %s\n",
              threads, rounds, binds, binds_ok.load(), binds_refused.load(), outcomes[0],
              outcomes[1], outcomes[2], still_named.load(), own_refused.load(), threads * rounds,
              named.ports ? "yes" : "no");
  EXPECT(outcomes[0] + outcomes[1] + outcomes[2] == lanes, "every lane reported");
  EXPECT(outcomes[2] == 0, "%llu lanes failed otherwise than unbound", outcomes[2]);
  EXPECT(still_named.load() == 0, "a destroyed runtime stayed the default mailbox");
  EXPECT(own_refused.load() == threads * rounds, "binding a destroyed runtime was refused");
  EXPECT(named.ports == 0, "nothing is bound once every runtime is destroyed");
  std::printf("bind_race: OK\n");
  CHECK_CUDA(cudaFree(outcomes));
  return 0;
}
