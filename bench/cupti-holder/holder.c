/*
 * cupti-holder: a stand-in for a profiler, to check that alignmalloc runs while another tool
 * holds CUPTI (Nsight Systems does this to every program it profiles).
 *
 * The CUDA driver loads it into a program through CUDA_INJECTION64_PATH and calls
 * InitializeInjection when the program initialises CUDA. Like a profiler, it brings its own copy
 * of CUPTI (the library at CUPTI_HOLDER_LIB; default: the system's libcupti.so.13) and
 * subscribes to CUPTI's callbacks for the whole process, so the program's own use of CUPTI finds
 * it taken.
 *
 *   cc -shared -fPIC -O2 -o cupti-holder.so bench/cupti-holder/holder.c -ldl
 *   cp /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 /tmp/cupti-copy.so
 *   CUDA_INJECTION64_PATH=$PWD/cupti-holder.so CUPTI_HOLDER_LIB=/tmp/cupti-copy.so \
 *     alignmalloc access --repeats 1
 *
 * It declares the four CUPTI entry points it calls instead of including cupti.h, so that it
 * builds with a C compiler alone.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*cupti_callback)(void *userdata, int domain, uint32_t cbid, const void *data);
typedef int (*cupti_subscribe)(void **subscriber, cupti_callback callback, void *userdata);
typedef int (*cupti_enable_domain)(uint32_t enable, void *subscriber, int domain);
typedef int (*cupti_get_result_string)(int result, const char **text);

/* CUPTI_CB_DOMAIN_DRIVER_API */
enum { DRIVER_API_DOMAIN = 1 };

static uint64_t calls_seen;

static void on_driver_call(void *userdata, int domain, uint32_t cbid, const void *data) {
    (void)userdata;
    (void)domain;
    (void)cbid;
    (void)data;
    __atomic_fetch_add(&calls_seen, 1, __ATOMIC_RELAXED);
}

static void say_calls_seen(void) {
    fprintf(stderr, "cupti-holder: held CUPTI; saw %llu driver calls\n",
            (unsigned long long)__atomic_load_n(&calls_seen, __ATOMIC_RELAXED));
}

int InitializeInjection(void) {
    const char *path = getenv("CUPTI_HOLDER_LIB");
    if (path == NULL) {
        path = "libcupti.so.13";
    }
    void *cupti = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (cupti == NULL) {
        fprintf(stderr, "cupti-holder: cannot load %s: %s\n", path, dlerror());
        return 0;
    }
    cupti_subscribe subscribe = (cupti_subscribe)dlsym(cupti, "cuptiSubscribe");
    cupti_enable_domain enable = (cupti_enable_domain)dlsym(cupti, "cuptiEnableDomain");
    cupti_get_result_string describe = (cupti_get_result_string)dlsym(cupti, "cuptiGetResultString");
    if (subscribe == NULL || enable == NULL) {
        fprintf(stderr, "cupti-holder: %s lacks cuptiSubscribe or cuptiEnableDomain\n", path);
        return 0;
    }
    void *subscriber = NULL;
    int result = subscribe(&subscriber, on_driver_call, NULL);
    if (result == 0) {
        result = enable(1, subscriber, DRIVER_API_DOMAIN);
    }
    const char *text = "?";
    if (describe != NULL) {
        describe(result, &text);
    }
    fprintf(stderr, "cupti-holder: subscribed through %s: %s\n", path, text);
    if (result == 0) {
        atexit(say_calls_seen);
    }
    return result == 0;
}
