#include <alignmalloc.h>
#include <stdio.h>
int main(void) {
  am_options o; am_options_default(&o); o.arena_bytes = 64u << 20;
  am_runtime *rt; am_runtime_create(&o, &rt);
  am_handle h; am_alloc(rt, 100, &h); am_free(rt, h);
  char b[8]; am_status s = am_read(rt, h, 0, b, 8);
  printf("%s: %s\n", am_status_name(s), am_last_error());
  s = am_free(rt, h);
  printf("%s: %s\n", am_status_name(s), am_last_error());
  am_runtime_destroy(rt);
  return 0;
}
