/* cuGetProcAddress v1 (CUDA 11.3 - 11.8 ABI, 4 arguments). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
typedef int (*getproc1_t)(const char *, void **, int, unsigned long long);
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    getproc1_t gp = (getproc1_t)dlsym(h, "cuGetProcAddress");
    launch_t l = 0; getproc1_t self = 0;
    if (!gp || gp("cuLaunchKernel", (void **)&l, 11080, 0) || !l) { printf("FAIL\n"); return 1; }
    gp("cuGetProcAddress", (void **)&self, 11080, 0);
    launch_t l2 = 0;
    self("cuLaunchKernel", (void **)&l2, 11080, 0);
    uint64_t ns = 0; void *p[1] = {&ns};
    for (int i = 0; i < 21; i++) l((void *)1, 1, 1, 1, 32, 1, 1, 0, (void *)0x60, p, 0);
    for (int i = 0; i < 4; i++) l2((void *)1, 1, 1, 1, 32, 1, 1, 0, (void *)0x60, p, 0);
    printf("OK\n");
    return 0;
}
