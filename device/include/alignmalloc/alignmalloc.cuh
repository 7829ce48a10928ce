// alignmalloc for CUDA C++: allocate and free from inside kernels.
//
//   #include <alignmalloc/alignmalloc.cuh>          // nvcc: link with -lalignmalloc
//
//   __global__ void k(unsigned n) {
//     am::ptr<float> xs{am::malloc(n * sizeof(float))};   // warp-arranged; any lanes, divergent too
//     if (xs.is_null()) return;                           // the status argument says why
//     for (unsigned i = 0; i < n; ++i) xs[i] = i;         // translated on every []
//     am::free(xs.handle);
//     float* plain = (float*)am::malloc_plain(n * sizeof(float));   // an ordinary pointer
//     am::free(plain);
//   }
//
//   int main() {
//     am_runtime* rt;
//     am_runtime_create(nullptr, &rt);   // the C ABI of <alignmalloc.h>
//     am::bind(rt);                      // once: every kernel on rt's GPU now allocates from rt
//     k<<<blocks, threads>>>(n);
//     ...
//     am_runtime_destroy(rt);
//   }
//
// Every call has two forms: one through the default mailbox, bound once from the host with
// am::bind(runtime), and one that takes an am::DeviceMailbox explicitly (from
// am_runtime_device_mailbox, passed as a kernel argument). A kernel that allocates before any
// runtime was bound gets null results and kStatusUnbound at once, never a hang.
//
// How binding reaches every kernel: each translation unit that includes this header has its own
// copy of the default mailbox in device memory (nvcc gives every .cu file its own device code),
// and registers, before main, a function that writes it. am::bind asks the library to call all
// of them, so one call binds every .cu file of the program; destroying the bound runtime unbinds
// them. The copy is per GPU too: am::bind writes the copies of the runtime's own device, so a
// program with several GPUs binds one runtime per device (device/examples/several_devices.cu). Under NVRTC (the Rust runtime's compile path) the default mailbox is the C symbol
// `alignmalloc_default_mailbox`, which the runtime writes when it loads the module.
#ifndef ALIGNMALLOC_ALIGNMALLOC_CUH
#define ALIGNMALLOC_ALIGNMALLOC_CUH

#include <alignmalloc/detail/layout.h>
#include <alignmalloc/detail/abi.h>
#include <alignmalloc/detail/client.cuh>

#if defined(__CUDACC_RTC__)
// One module per compile: a C symbol the runtime finds by name after loading it.
extern "C" {
__device__ am::DeviceMailbox alignmalloc_default_mailbox;
}
#define ALIGNMALLOC_DEFAULT_MAILBOX alignmalloc_default_mailbox
#else
namespace am {
namespace detail {
// This translation unit's copy (static: every .cu file that includes the header has one, and
// host linking sees no duplicate).
static __device__ DeviceMailbox default_mailbox;
}  // namespace detail
}  // namespace am
#define ALIGNMALLOC_DEFAULT_MAILBOX ::am::detail::default_mailbox
#endif

namespace am {

// The default mailbox as this kernel sees it (all zero until bound).
__device__ __forceinline__ const DeviceMailbox& default_mailbox() {
  return ALIGNMALLOC_DEFAULT_MAILBOX;
}

// Allocate `size` bytes, warp-arranged for portion and large sizes (over 2 KiB). Returns 0 when
// the lane asked 0 bytes or the request failed (`*status` says why).
__device__ inline u64 malloc(u64 size, u32* status = nullptr) {
  return malloc(default_mailbox(), size, status);
}

// Allocate `size` bytes, thread-contiguous: a plain handle (`ptr<T>::plain()` is a raw pointer).
__device__ inline u64 malloc_contiguous(u64 size, u32* status = nullptr) {
  return malloc_contiguous(default_mailbox(), size, status);
}

// Allocate `size` bytes, thread-contiguous, as a plain pointer (nullptr on failure), for code
// that expects one: operator new, containers, Thrust allocators. Give it back with am::free.
__device__ inline void* malloc_plain(u64 size, u32* status = nullptr) {
  return malloc_plain(default_mailbox(), size, status);
}

// Give back a handle from am::malloc or am::malloc_contiguous (0 is a no-op).
__device__ inline FreeResult free(u64 handle) { return free(default_mailbox(), handle); }

// Give back a pointer from am::malloc_plain (nullptr is a no-op).
__device__ inline FreeResult free(const void* pointer) {
  return free(default_mailbox(), pointer);
}

// Give back a handle without waiting for the host (see am::post_free in detail/client.cuh).
__device__ inline FreeResult post_free(u64 handle) { return post_free(default_mailbox(), handle); }

// Give back a pointer without waiting for the host.
__device__ inline FreeResult post_free(const void* pointer) {
  return post_free(default_mailbox(), pointer);
}

}  // namespace am

#if defined(__CUDACC__) && !defined(__CUDACC_RTC__)
// Host side under nvcc: the binding of this translation unit's default mailbox.
#include <cuda_runtime.h>
#include <alignmalloc.h>

static_assert(sizeof(am_device_mailbox) == sizeof(am::DeviceMailbox),
              "alignmalloc.h and alignmalloc.cuh disagree on the device mailbox");

namespace am {
namespace detail {

// Writes this translation unit's default mailbox; a cudaError_t as int.
static int bind_this_unit(const am_device_mailbox* mailbox) {
  return (int)cudaMemcpyToSymbol(default_mailbox, mailbox, sizeof(DeviceMailbox));
}

// Registers bind_this_unit with the library before main runs.
struct UnitRegistration {
  UnitRegistration() { am_register_unit(&bind_this_unit); }
};
static UnitRegistration unit_registration;

}  // namespace detail

// Make `runtime` the default mailbox of every kernel of the program (every .cu file that
// includes this header). A status of <alignmalloc.h>; am_last_error() says why on failure.
inline am_status bind(am_runtime* runtime) { return am_bind(runtime); }

}  // namespace am
#endif

#endif  // ALIGNMALLOC_ALIGNMALLOC_CUH
