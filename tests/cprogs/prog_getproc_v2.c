/* cuGetProcAddress_v2 (CUDA 12+): legacy and per-thread flavours, and cuGetProcAddress handed
 * out by itself (later look-ups through it must be hooked too). Plus cudaGetDriverEntryPoint. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
typedef int (*getproc_t)(const char *, void **, int, unsigned long long, int *);
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
typedef struct { unsigned gx, gy, gz, bx, by, bz, shmem; void *stream; void *attrs; unsigned nattrs; } CUlaunchConfig;
typedef int (*launchex_t)(const CUlaunchConfig *, void *, void **, void **);
int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    getproc_t gp = (getproc_t)dlsym(h, "cuGetProcAddress_v2");
    if (!gp) { printf("FAIL\n"); return 1; }
    launch_t l = 0, lp = 0; launchex_t lx = 0; getproc_t gp2 = 0;
    int st = -1;
    gp("cuLaunchKernel", (void **)&l, 12000, 0, &st);
    gp("cuLaunchKernel", (void **)&lp, 12000, 2 /* per-thread */, &st);
    gp("cuGetProcAddress", (void **)&gp2, 12080, 0, &st);
    if (!l || !lp || !gp2 || st != 0) { printf("FAIL get\n"); return 1; }
    gp2("cuLaunchKernelEx", (void **)&lx, 12080, 0, &st);
    /* Unknown future version: must pass through (whatever the driver returns). */
    launch_t lfut = 0;
    gp("cuLaunchKernel", (void **)&lfut, 99000, 0, &st);
    uint64_t ns = 0; void *p[1] = {&ns};
    for (int i = 0; i < 11; i++) l((void *)1, 1, 1, 1, 32, 1, 1, 0, (void *)0x50, p, 0);
    for (int i = 0; i < 12; i++) lp((void *)1, 1, 1, 1, 32, 1, 1, 0, 0, p, 0);
    CUlaunchConfig c = {1, 1, 1, 32, 1, 1, 0, (void *)0x51, 0, 0};
    for (int i = 0; i < 13; i++) lx(&c, (void *)2, p, 0);
    for (int i = 0; i < 7; i++) lfut((void *)1, 1, 1, 1, 32, 1, 1, 0, (void *)0x52, p, 0);
    printf("OK\n");
    return 0;
}
