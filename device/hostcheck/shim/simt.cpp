// The host warp of simt.h: each lane a user-level context (ucontext) on the calling thread with a
// stack of its own, switched by a scheduler that runs the lowest lane that can run; warp-wide
// instructions are meetings of the lanes of their mask. One thread runs the whole warp, so a
// lane switch costs no system call and the order of the lanes' steps is fixed.
#include "simt.h"

#include <ucontext.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <map>
#include <memory>
#include <thread>

namespace simt {
namespace {

// Enough for the device code's frames (a few hundred bytes each) many times over.
constexpr size_t kLaneStackBytes = 256 * 1024;

// One warp-wide instruction in flight: the lanes of `mask` meet at their `seq`-th instruction
// with that mask.
struct Meeting {
  unsigned mask;
  unsigned long long seq;
  unsigned arrived;
  unsigned left;
  unsigned long long values[32];
};

struct Warp {
  ucontext_t scheduler;
  ucontext_t lanes[32];
  // Not zeroed: a lane's frames are written before they are read.
  std::unique_ptr<char[]> stacks{new char[32 * kLaneStackBytes]};
  void (*body)(unsigned lane, void* context);
  void* context;
  unsigned live = 0;     // lanes not returned
  unsigned waiting = 0;  // lanes at a meeting or an __activemask() not yet complete
  std::list<Meeting> meetings;
  std::map<unsigned, unsigned long long> seqs[32];  // per lane: instructions met, per mask
  unsigned gathering = 0;                           // lanes at an __activemask()
  unsigned gathered = 0;                            // the last round's lanes
};

thread_local Warp* this_warp = nullptr;
thread_local unsigned this_lane = 0;

// Complete the __activemask() round when every live lane is at it.
void settle_gather(Warp& w) {
  if (w.gathering != 0 && (w.live & ~w.gathering) == 0) {
    w.gathered = w.gathering;
    w.waiting &= ~w.gathering;
    w.gathering = 0;
  }
}

// Back to the scheduler until this lane is chosen again.
void yield_lane() {
  Warp& w = *this_warp;
  swapcontext(&w.lanes[this_lane], &w.scheduler);
}

void lane_entry() {
  Warp& w = *this_warp;
  const unsigned lane = this_lane;
  w.body(lane, w.context);
  w.live &= ~(1u << lane);
  settle_gather(w);
  // Returning resumes the scheduler (uc_link).
}

}  // namespace

void fail(const char* what, unsigned mask) {
  std::fprintf(stderr, "simt: %s (lanes 0x%08x, lane %u)\n", what, mask, this_lane);
  std::abort();
}

unsigned current_lane() { return this_lane; }

void exchange(unsigned mask, unsigned long long value, unsigned long long out[32]) {
  Warp& w = *this_warp;
  const unsigned me = 1u << this_lane;
  if ((mask & me) == 0) fail("a warp-wide instruction whose mask leaves out its own lane", mask);
  if ((mask & ~w.live) != 0) fail("a warp-wide instruction naming lanes that returned", mask);
  const unsigned long long seq = ++w.seqs[this_lane][mask];
  auto meeting = w.meetings.begin();
  while (meeting != w.meetings.end() && !(meeting->mask == mask && meeting->seq == seq)) ++meeting;
  if (meeting == w.meetings.end()) {
    w.meetings.push_back(Meeting{mask, seq, 0, 0, {}});
    meeting = std::prev(w.meetings.end());
  }
  meeting->values[this_lane] = value;
  meeting->arrived |= me;
  if (meeting->arrived == mask) {
    w.waiting &= ~mask;
  } else {
    w.waiting |= me;
  }
  // Even the last lane to arrive steps back, so the meeting's lanes go on in lane order.
  yield_lane();
  if (meeting->arrived != mask) fail("a lane left a warp-wide instruction before its lanes met", mask);
  for (unsigned lane = 0; lane < 32; ++lane) out[lane] = meeting->values[lane];
  // The last of its lanes to read the meeting drops it (a lane may meet its next instruction with
  // the same mask before the others read this one: that is another seq).
  meeting->left |= me;
  if (meeting->left == mask) w.meetings.erase(meeting);
}

unsigned active_lanes() {
  Warp& w = *this_warp;
  w.gathering |= 1u << this_lane;
  w.waiting |= 1u << this_lane;
  settle_gather(w);
  yield_lane();
  if (w.waiting & (1u << this_lane)) fail("an __activemask() left before its lanes met", w.live);
  return w.gathered;
}

void run_warp(unsigned lanes, void (*body)(unsigned lane, void* context), void* context) {
  Warp w;
  w.body = body;
  w.context = context;
  w.live = lanes;
  this_warp = &w;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if ((lanes >> lane & 1u) == 0) continue;
    getcontext(&w.lanes[lane]);
    w.lanes[lane].uc_stack.ss_sp = w.stacks.get() + lane * kLaneStackBytes;
    w.lanes[lane].uc_stack.ss_size = kLaneStackBytes;
    w.lanes[lane].uc_link = &w.scheduler;
    makecontext(&w.lanes[lane], lane_entry, 0);
  }
  for (;;) {
    const unsigned can_run = w.live & ~w.waiting;
    if (can_run == 0) {
      if (w.live != 0) fail("every live lane waits at a warp-wide instruction", w.live);
      break;
    }
    this_lane = __builtin_ctz(can_run);
    swapcontext(&w.scheduler, &w.lanes[this_lane]);
  }
  this_warp = nullptr;
}

}  // namespace simt

void __nanosleep(unsigned ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }

namespace am {
namespace detail {
unsigned lane_id() { return simt::current_lane(); }
// Stripe 0, as the CPU warps' counters.
unsigned sm_id() { return 0; }
unsigned global_warp_id() { return 0; }
}  // namespace detail
}  // namespace am
