// Create a runtime, allocate, write, read back, free, and see how a mistake is answered.
// Build: cc -std=c11 first_steps.c $(pkg-config --cflags --libs alignmalloc) -o first_steps
#include <alignmalloc.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  am_options options;
  am_options_default(&options);
  options.arena_bytes = 64u << 20;  // 64 MiB; the GPU when there is one, else the sim backend
  am_runtime *rt;
  if (am_runtime_create(&options, &rt) != AM_OK) {
    fprintf(stderr, "%s\n", am_last_error());
    return 1;
  }
  char why[256];
  am_runtime_backend_reason(rt, why, sizeof why, NULL);
  printf("backend: %s\n", why);
  am_handle h;
  if (am_alloc(rt, 1000, &h) != AM_OK) {
    fprintf(stderr, "%s\n", am_last_error());
    return 1;
  }
  const char text[] = "bytes go in and come back through the layout";
  char back[sizeof text];
  am_write(rt, h, 0, text, sizeof text);
  am_read(rt, h, 0, back, sizeof back);
  printf("read back: %s\n", strcmp(text, back) == 0 ? "the same" : "DIFFERENT");
  am_free(rt, h);
  am_status again = am_free(rt, h);  // a mistake: the status names it, nothing changes
  printf("second free: %s (%s)\n", am_status_name(again), am_last_error());
  bool empty = false;
  am_check(rt, &empty);  // the allocator's invariants, and whether everything was freed
  printf("all freed: %s\n", empty ? "yes" : "no");
  am_runtime_destroy(rt);
  return (again == AM_ERR_DOUBLE_FREE && empty && strcmp(text, back) == 0) ? 0 : 1;
}
