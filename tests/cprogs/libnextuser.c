/* A library that finds the driver with dlsym(RTLD_NEXT, ...) (as interposing libraries do). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
int nextuser_run(int n) {
    launch_t l = (launch_t)dlsym(RTLD_NEXT, "cuLaunchKernel");
    void *(*m)(size_t) = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    if (!l || !m) return -1;
    void *x = m(16);
    free(x);
    uint64_t ns = 0; void *p[1] = {&ns};
    for (int i = 0; i < n; i++) l((void *)1, 1, 1, 1, 32, 1, 1, 0, (void *)0x70, p, 0);
    return 0;
}
