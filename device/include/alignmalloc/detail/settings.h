// alignmalloc device settings: how a waiting warp backs off. The twin of
// `runtime::settings::DeviceSettings` (whose defaults `device/hostcheck` holds equal to these).
//
// Each is a macro of the same name as its environment variable, so it can be set at compile
// time: `nvcc -DALIGNMALLOC_POLL_PAUSE_MAX_NS=1024 ...`; the runtime passes its own values
// (defaults, builder, `ALIGNMALLOC_*` environment) to NVRTC when it compiles kernels. Pauses are
// __nanosleep arguments in nanoseconds: each wait starts at its minimum and doubles up to its
// maximum. Pure integer constants: compiles under nvcc, NVRTC and host C++.
#ifndef ALIGNMALLOC_SETTINGS_H
#define ALIGNMALLOC_SETTINGS_H

#include <alignmalloc/detail/layout.h>

// A warp waiting for the host's answer in the mailbox.
#ifndef ALIGNMALLOC_POLL_PAUSE_MIN_NS
#define ALIGNMALLOC_POLL_PAUSE_MIN_NS 32
#endif
#ifndef ALIGNMALLOC_POLL_PAUSE_MAX_NS
#define ALIGNMALLOC_POLL_PAUSE_MAX_NS 4096
#endif
// Polls between two reads of the mailbox's closed flag (one word every waiting warp reads, so
// it is read rarely): at the longest pause, how long a warp that posts after the close waits.
#ifndef ALIGNMALLOC_POLLS_PER_CLOSED_CHECK
#define ALIGNMALLOC_POLLS_PER_CLOSED_CHECK 1024
#endif
// A leader that found every port held, before it probes them all again.
#ifndef ALIGNMALLOC_PORT_SWEEP_PAUSE_NS
#define ALIGNMALLOC_PORT_SWEEP_PAUSE_NS 256
#endif
// A lane waiting for a device-cache class's lock.
#ifndef ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS
#define ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS 32
#endif
#ifndef ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS
#define ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS 1024
#endif
// The class lock's holder waiting for the host to publish the class's next slab.
#ifndef ALIGNMALLOC_REFILL_PAUSE_MIN_NS
#define ALIGNMALLOC_REFILL_PAUSE_MIN_NS 64
#endif
#ifndef ALIGNMALLOC_REFILL_PAUSE_MAX_NS
#define ALIGNMALLOC_REFILL_PAUSE_MAX_NS 4096
#endif

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
// grows) and at most 1 ms (about __nanosleep's longest), minimum no greater than maximum.
constexpr u32 kLongestPauseNs = 1000000;
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
