/* Writes to a range from several threads (probe2.py, probe3.py): memset, or one byte every
 * `stride` bytes. */
#include <pthread.h>
#include <string.h>
#include <stdint.h>
typedef struct { char *p; size_t n; size_t stride; } job;
static void *run(void *a) { job *j = a; if (j->stride == 0) memset(j->p, 0, j->n); else for (size_t i = 0; i < j->n; i += j->stride) ((volatile char *)j->p)[i] = 0; return 0; }
void touch(char *p, size_t n, int threads, size_t stride, int interleave) {
  pthread_t t[64]; job j[64]; size_t c = n / threads;
  for (int i = 0; i < threads; i++) { j[i].p = p + i * c; j[i].n = c; j[i].stride = stride; pthread_create(&t[i], 0, run, &j[i]); }
  for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
}
