/* Triton/cuBLAS style: dlopen("libcuda.so.1") + dlsym(handle, name) on the driver. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
typedef struct { unsigned gx, gy, gz, bx, by, bz, shmem; void *stream; void *attrs; unsigned nattrs; } CUlaunchConfig;
typedef int (*launchex_t)(const CUlaunchConfig *, void *, void **, void **);
typedef int (*coop_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **);
typedef int (*graph_t)(void *, void *);
int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("FAIL dlopen\n"); return 1; }
    launch_t l = (launch_t)dlsym(h, "cuLaunchKernel");
    launchex_t lx = (launchex_t)dlsym(h, "cuLaunchKernelEx");
    coop_t co = (coop_t)dlsym(h, "cuLaunchCooperativeKernel");
    graph_t gl = (graph_t)dlsym(h, "cuGraphLaunch");
    void *missing = dlsym(h, "cuNoSuchFunction");
    if (!l || !lx || !co || !gl || missing) { printf("FAIL dlsym\n"); return 1; }
    uint64_t ns = 0; void *p[1] = {&ns};
    for (int i = 0; i < 50; i++) l((void *)1, 1, 1, 1, 32, 1, 1, 0, (void *)0x40, p, 0);
    CUlaunchConfig c = {2, 2, 2, 64, 2, 1, 128, (void *)0x41, 0, 0};
    for (int i = 0; i < 40; i++) lx(&c, (void *)2, p, 0);
    for (int i = 0; i < 30; i++) co((void *)3, 8, 1, 1, 256, 1, 1, 0, (void *)0x42, p);
    for (int i = 0; i < 20; i++) gl((void *)4, (void *)0x43);
    printf("OK\n");
    return 0;
}
