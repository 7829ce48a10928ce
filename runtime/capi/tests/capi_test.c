// libalignmalloc from C, on the sim backend (no GPU needed): host objects round trip, the
// counters count, and every error a host program can provoke gets its code and a message, with
// the allocator's invariants intact afterwards. CI builds it with
//   cc -std=c11 -Wall -Wextra -Werror capi_test.c -I<include> -L<lib> -lalignmalloc
// and runs it; it prints one line per check and exits non-zero if any failed.
#include <alignmalloc.h>

#include <stdio.h>
#include <string.h>

static int passed, failed;

static void expect_status(const char* what, am_status got, am_status want) {
  if (got == want) {
    ++passed;
    printf("ok   %s: %s\n", what, am_status_name(got));
  } else {
    ++failed;
    printf("FAIL %s: got %s, want %s (%s)\n", what, am_status_name(got), am_status_name(want),
           am_last_error());
  }
}

static void expect(const char* what, int ok) {
  if (ok) {
    ++passed;
    printf("ok   %s\n", what);
  } else {
    ++failed;
    printf("FAIL %s\n", what);
  }
}

static void expect_clean(am_runtime* rt) {
  bool empty = false;
  expect_status("invariants hold", am_check(rt, &empty), AM_OK);
}

int main(void) {
  am_options options;
  expect_status("defaults", am_options_default(&options), AM_OK);
  options.backend = AM_BACKEND_SIM;
  options.arena_bytes = 64u << 20;
  am_runtime* rt = NULL;
  expect_status("create (sim)", am_runtime_create(&options, &rt), AM_OK);
  if (rt == NULL) return 1;

  uint32_t backend = 99;
  expect_status("backend", am_runtime_backend(rt, &backend), AM_OK);
  expect("the backend is the simulation", backend == AM_BACKEND_SIM);
  size_t length = 0;
  expect_status("reason length", am_runtime_backend_reason(rt, NULL, 0, &length), AM_OK);
  char reason[128];
  expect_status("reason", am_runtime_backend_reason(rt, reason, sizeof reason, NULL), AM_OK);
  expect("the reason is whole", strlen(reason) == length && length > 0);

  // A plain object: write, read back, capacity, free.
  am_handle h = 0;
  expect_status("alloc 1000 bytes", am_alloc(rt, 1000, &h), AM_OK);
  unsigned char data[1000], back[1000];
  for (int i = 0; i < 1000; ++i) data[i] = (unsigned char)(i * 7);
  expect_status("write", am_write(rt, h, 0, data, sizeof data), AM_OK);
  expect_status("read", am_read(rt, h, 0, back, sizeof back), AM_OK);
  expect("read gives what was written", memcmp(data, back, sizeof data) == 0);
  expect("the pointer holds the bytes", memcmp(am_handle_pointer(h, 0), data, sizeof data) == 0);
  uint64_t capacity = 0;
  expect_status("capacity", am_capacity(rt, h, &capacity), AM_OK);
  expect("capacity covers the object", capacity >= 1000);
  expect_status("read past the end", am_read(rt, h, capacity - 4, back, 8), AM_ERR_OUT_OF_BOUNDS);
  expect_status("interior free", am_free(rt, h + 16), AM_ERR_INTERIOR_POINTER);
  expect_status("free", am_free(rt, h), AM_OK);
  expect_status("double free", am_free(rt, h), AM_ERR_DOUBLE_FREE);
  expect("the message says why", strstr(am_last_error(), "DoubleFree") != NULL);
  expect_status("foreign handle", am_free(rt, 0x12345000u), AM_ERR_INVALID_HANDLE);
  expect_status("free of null", am_free(rt, 0), AM_OK);
  expect_status("read of a freed object", am_read(rt, h, 0, back, 8), AM_ERR_DOUBLE_FREE);

  // By pointer.
  expect_status("alloc 64 bytes", am_alloc(rt, 64, &h), AM_OK);
  void* p = am_handle_pointer(h, 0);
  expect_status("interior pointer", am_free_pointer(rt, (char*)p + 8), AM_ERR_INTERIOR_POINTER);
  expect_status("free by pointer", am_free_pointer(rt, p), AM_OK);
  expect_status("double free by pointer", am_free_pointer(rt, p), AM_ERR_DOUBLE_FREE);
  expect_status("foreign pointer", am_free_pointer(rt, &options), AM_ERR_INVALID_HANDLE);

  // Arranged objects for 100 threads.
  am_handle handles[100];
  expect_status("alloc arranged", am_alloc_arranged(rt, 100, 8192, handles), AM_OK);
  uint64_t word = 0xfeedface;
  expect_status("write thread 99's last word", am_write(rt, handles[99], 8184, &word, 8), AM_OK);
  uint64_t got = 0;
  expect_status("read it back", am_read(rt, handles[99], 8184, &got, 8), AM_OK);
  expect("the word survived", got == word);
  expect_status("free them", am_free_many(rt, handles, 100), AM_OK);
  expect_status("free them again", am_free_many(rt, handles, 100), AM_ERR_DOUBLE_FREE);
  expect_clean(rt);

  // Sizes and room.
  expect_status("zero size", am_alloc(rt, 0, &h), AM_ERR_ZERO_SIZE);
  expect_status("zero threads", am_alloc_arranged(rt, 0, 8, handles), AM_ERR_ZERO_SIZE);
  expect_status("over the per-object limit", am_alloc(rt, (uint64_t)1 << 40, &h),
                AM_ERR_SIZE_OVER_LIMIT);
  expect_status("over the arena", am_alloc(rt, (uint64_t)1 << 30, &h), AM_ERR_OUT_OF_MEMORY);
  expect_clean(rt);

  // Null arguments.
  expect_status("null handle out", am_alloc(rt, 8, NULL), AM_ERR_NULL_ARGUMENT);
  expect_status("null handles out", am_alloc_arranged(rt, 4, 8, NULL), AM_ERR_NULL_ARGUMENT);
  expect_status("null source", am_write(rt, h, 0, NULL, 8), AM_ERR_NULL_ARGUMENT);
  expect_status("null destination", am_read(rt, h, 0, NULL, 8), AM_ERR_NULL_ARGUMENT);
  expect_status("null handle list", am_free_many(rt, NULL, 3), AM_ERR_NULL_ARGUMENT);
  expect_status("null counters", am_counters_get(rt, NULL), AM_ERR_NULL_ARGUMENT);
  expect_status("null stats", am_service_stats_get(rt, NULL), AM_ERR_NULL_ARGUMENT);
  expect_status("null capacity", am_capacity(rt, h, NULL), AM_ERR_NULL_ARGUMENT);
  expect_status("null runtime", am_free(NULL, 8), AM_ERR_NULL_ARGUMENT);
  expect_status("null options out", am_options_default(NULL), AM_ERR_NULL_ARGUMENT);
  expect_status("null runtime out", am_runtime_create(&options, NULL), AM_ERR_NULL_ARGUMENT);
  expect_status("null binder", am_register_unit(NULL), AM_ERR_NULL_ARGUMENT);

  // GPU-only calls on the simulation.
  am_device_mailbox mailbox;
  expect_status("device mailbox on sim", am_runtime_device_mailbox(rt, &mailbox),
                AM_ERR_WRONG_BACKEND);
  expect_status("bind on sim", am_bind(rt), AM_ERR_WRONG_BACKEND);
  am_fault_report report;
  expect_status("fault counters on sim", am_take_faults(rt, &report), AM_ERR_WRONG_BACKEND);

  // Bad options, each named.
  am_runtime* other = NULL;
  am_options bad = options;
  bad.backend = 7;
  expect_status("unknown backend", am_runtime_create(&bad, &other), AM_ERR_INVALID_ARGUMENT);
  expect("the message names the field", strstr(am_last_error(), "options.backend") != NULL);
  bad = options;
  bad.size = 4;
  expect_status("options not from am_options_default", am_runtime_create(&bad, &other),
                AM_ERR_INVALID_ARGUMENT);
  bad = options;
  bad.arena_bytes = 1u << 20;
  expect_status("arena under two blocks", am_runtime_create(&bad, &other), AM_ERR_CONFIG);
  expect("no runtime was made", other == NULL);

  // The counters saw all of it.
  am_counters counters;
  expect_status("counters", am_counters_get(rt, &counters), AM_OK);
  expect("objects freed: 1 + 1 + 100", counters.lanes_freed == 102);
  expect("double frees: 1 + 1 + 100 (+ 1 read)", counters.by_lane_status[2] >= 102);
  am_service_stats stats;
  expect_status("service stats", am_service_stats_get(rt, &stats), AM_OK);
  bool empty = false;
  expect_status("check", am_check(rt, &empty), AM_OK);
  expect("nothing is left allocated", empty);

  // Use after destroy.
  expect_status("destroy", am_runtime_destroy(rt), AM_OK);
  expect_status("alloc after destroy", am_alloc(rt, 8, &h), AM_ERR_INVALID_RUNTIME);
  expect_status("destroy twice", am_runtime_destroy(rt), AM_ERR_INVALID_RUNTIME);
  expect_status("a forged runtime", am_free((am_runtime*)&options, 8), AM_ERR_INVALID_RUNTIME);
  expect("an unknown status has a name", strcmp(am_status_name(-5), "unknown status") == 0);

  // A tiered arena: large objects in the device tier, small ones in the host tier.
  expect_status("defaults again", am_options_default(&options), AM_OK);
  options.backend = AM_BACKEND_SIM;
  options.arena_bytes = 32u << 20;
  options.placement = AM_PLACEMENT_TIERED;
  options.device_tier_bytes = 8u << 20;
  options.hot_object_bytes = 64u << 10;
  expect_status("create (tiered)", am_runtime_create(&options, &rt), AM_OK);
  am_handle hot = 0, cold = 0;
  uint32_t tier = 99;
  expect_status("alloc 1 MiB", am_alloc(rt, 1u << 20, &hot), AM_OK);
  expect_status("alloc 4 KiB", am_alloc(rt, 4u << 10, &cold), AM_OK);
  expect_status("tier of the large object", am_tier_of(rt, hot, &tier), AM_OK);
  expect("it is in the device tier", tier == AM_TIER_DEVICE);
  expect_status("tier of the small object", am_tier_of(rt, cold, &tier), AM_OK);
  expect("it is in the host tier", tier == AM_TIER_HOST);
  expect_status("free the large object", am_free(rt, hot), AM_OK);
  expect_status("free the small object", am_free(rt, cold), AM_OK);
  expect_status("destroy (tiered)", am_runtime_destroy(rt), AM_OK);

  printf("capi: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
