// alignmalloc device settings: how a waiting warp backs off (`runtime::settings::DeviceSettings`).
//
// Each is a macro of the same name as its environment variable, with its default in abi.h
// (generated from the Rust defaults), so it can be set at compile
// time: `nvcc -DALIGNMALLOC_POLL_PAUSE_MAX_NS=1024 ...`; the runtime passes its own values
// (defaults, builder, `ALIGNMALLOC_*` environment) to NVRTC when it compiles kernels. Pauses are
// __nanosleep arguments in nanoseconds: each wait starts at its minimum and doubles up to its
// maximum. Pure integer constants: compiles under nvcc, NVRTC and host C++.
#ifndef ALIGNMALLOC_SETTINGS_H
#define ALIGNMALLOC_SETTINGS_H

#include <alignmalloc/detail/layout.h>

namespace am {

constexpr u32 kPollPauseMinNs = ALIGNMALLOC_POLL_PAUSE_MIN_NS;
constexpr u32 kPollPauseMaxNs = ALIGNMALLOC_POLL_PAUSE_MAX_NS;
constexpr u32 kPollsPerClosedCheck = ALIGNMALLOC_POLLS_PER_CLOSED_CHECK;
constexpr u32 kPortSweepPauseNs = ALIGNMALLOC_PORT_SWEEP_PAUSE_NS;
constexpr u32 kCacheLockPauseMinNs = ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS;
constexpr u32 kCacheLockPauseMaxNs = ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS;
constexpr u32 kRefillPauseMinNs = ALIGNMALLOC_REFILL_PAUSE_MIN_NS;
constexpr u32 kRefillPauseMaxNs = ALIGNMALLOC_REFILL_PAUSE_MAX_NS;

// The same ranges `DeviceSettings::check` enforces: a pause of at least 1 ns (doubling 0 never
// grows) and at most kLongestPauseNs (about __nanosleep's longest), minimum no greater than
// maximum.
static_assert(kPollPauseMinNs >= 1 && kPollPauseMinNs <= kPollPauseMaxNs && kPollPauseMaxNs <= kLongestPauseNs,
              "ALIGNMALLOC_POLL_PAUSE_MIN_NS/MAX_NS: need 1 <= min <= max <= 1000000");
static_assert(kCacheLockPauseMinNs >= 1 && kCacheLockPauseMinNs <= kCacheLockPauseMaxNs && kCacheLockPauseMaxNs <= kLongestPauseNs,
              "ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS/MAX_NS: need 1 <= min <= max <= 1000000");
static_assert(kRefillPauseMinNs >= 1 && kRefillPauseMinNs <= kRefillPauseMaxNs && kRefillPauseMaxNs <= kLongestPauseNs,
              "ALIGNMALLOC_REFILL_PAUSE_MIN_NS/MAX_NS: need 1 <= min <= max <= 1000000");
static_assert(kPortSweepPauseNs >= 1 && kPortSweepPauseNs <= kLongestPauseNs,
              "ALIGNMALLOC_PORT_SWEEP_PAUSE_NS: need 1 <= pause <= 1000000");
static_assert(kPollsPerClosedCheck >= 1, "ALIGNMALLOC_POLLS_PER_CLOSED_CHECK: need at least 1");

// The pause after `pause` in a wait whose longest is `longest`: doubled, never past it.
AM_HD u32 next_pause(u32 pause, u32 longest) { return pause >= longest / 2 ? longest : pause * 2; }

}  // namespace am

#endif  // ALIGNMALLOC_SETTINGS_H
