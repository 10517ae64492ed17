/* A framework that unloads and reloads its CUDA/NCCL libraries (dlclose, then dlopen again),
 * keeping the function pointers it looked up before, under load from a few threads:
 *   prog_dlclose nccl    : libncclpart.so (RTLD_LOCAL, links libnccl.so.2) run, closed, the address
 *                          space refilled, opened and run again;
 *   prog_dlclose cudart  : libcudart.so.13 (RTLD_LOCAL): 100 launches from 4 threads through a
 *                          dlsym'd cudaLaunchKernel, closed, refilled, reopened, looked up again,
 *                          100 launches more.
 * Prints "OK pinned=<0|1>" (1: the library was still loaded after the dlclose). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*sync_t)(void *);
static void kernel(void) {}
/* Occupies freed address space so that a reloaded library lands somewhere else. */
static void refill(void) {
    for (int i = 0; i < 1024; i++) mmap(0, 1 << 12, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < 64; i++) mmap(0, 1 << 16, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < 16; i++) mmap(0, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}
static launch_t g_launch;
static void *launcher(void *arg) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    uint64_t ns = 0; void *p[1] = {&ns};
    for (int i = 0; i < 25; i++) g_launch((void *)kernel, g, b, p, 0, arg);
    return 0;
}
static int launch_threads(launch_t f) {
    g_launch = f;
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, launcher, (void *)(0x40 + i));
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    return 0;
}
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && !strcmp(argv[1], "nccl")) {
        int pinned = 0;
        for (int round = 0; round < 2; round++) {
            void *h = dlopen("libncclpart.so", RTLD_NOW | RTLD_LOCAL);
            if (!h) { printf("FAIL %s\n", dlerror()); return 1; }
            int (*run)(void) = (int (*)(void))dlsym(h, "part_run");
            if (!run || run() != 0) { printf("FAIL run %d\n", round); return 1; }
            usleep(30000);
            dlclose(h);
            void *still = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
            if (still) { pinned = 1; dlclose(still); }
            refill();
        }
        printf("OK pinned=%d\n", pinned);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "cudart")) {
        void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
        if (!h) { printf("FAIL %s\n", dlerror()); return 1; }
        launch_t old = (launch_t)dlsym(h, "cudaLaunchKernel");
        sync_t sync = (sync_t)dlsym(h, "cudaStreamSynchronize");
        if (!old || !sync) { printf("FAIL dlsym\n"); return 1; }
        launch_threads(old);
        sync(0);
        dlclose(h);
        void *still = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
        int pinned = still != 0;
        if (still) dlclose(still);
        refill();
        h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
        if (!h) { printf("FAIL reopen %s\n", dlerror()); return 1; }
        launch_t now = (launch_t)dlsym(h, "cudaLaunchKernel");
        if (!now) { printf("FAIL dlsym again\n"); return 1; }
        launch_threads(now);
        usleep(30000);
        printf("OK pinned=%d\n", pinned);
        return 0;
    }
    fprintf(stderr, "usage: prog_dlclose nccl|cudart\n");
    return 2;
}
