/* A side task for the gate tests (linked against the stand-in libcudart.so.13, run under
 * LD_PRELOAD=libfreeride.so with FREERIDE_ROLE=sidetask).
 *   gate_side loop <kernel_us> [max_launches]  : launches kernel_us-long kernels on one stream,
 *        never synchronizing (a task that never yields); "ready" once its stream exists;
 *        with max_launches, synchronizes and prints "done <n>" after that many.
 *   gate_side bench <n>                        : n launches of 1 µs kernels (each followed by a
 *        stream sync every 64), prints "ns_per_launch <x>" (scripts/bench-gate).
 *   gate_side mem <mib> <mib> ...              : cudaMalloc each size in turn ("free" frees the
 *        first still-held block), printing each result code on one line.
 *   gate_side hold <mib> [kernel_us]           : cudaMalloc mib (0: none), then (with kernel_us)
 *        one kernel of that length and a sync; prints "held <rc>" and waits until stdin closes.
 *   gate_side graph <kernel_us> <nodes>        : a CUDA graph of <nodes> kernels of kernel_us each,
 *        launched again and again on one stream, never synchronizing; "ready" once instantiated.
 *   gate_side loop2 <kernel_us>                : the never-yielding loop on GPUs 0 and 1 at once,
 *        one thread each (cudaSetDevice, its own stream); "ready" once both streams exist.
 *   gate_side pause <kernel_us> <n> <host_ms>  : n kernels on one stream (no sync), then host_ms
 *        busy on the host making no CUDA call (data loading, a first cuBLAS call), then n more and
 *        a sync; prints "paused" before the host work and "done <2n>" at the end. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef struct { unsigned x, y, z; } dim3;
typedef struct { void *func; dim3 grid, block; unsigned smem; void **params, **extra; } KernelNodeParams;
int cudaSetDevice(int);
int cudaGraphCreate(void **, unsigned);
int cudaGraphAddKernelNode(void **, void *, void *const *, size_t, const KernelNodeParams *);
int cudaGraphInstantiate(void **, void *, unsigned long long);
int cudaGraphLaunch(void *, void *);
int cudaStreamCreate(void **);
int cudaStreamSynchronize(void *);
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
static void side_kernel(void) {}

static uint64_t loop2_ns;
static pthread_barrier_t loop2_ready;
static void *loop2_thread(void *arg) {
    int dev = (int)(intptr_t)arg;
    void *s = 0;
    if (cudaSetDevice(dev) != 0 || cudaStreamCreate(&s) != 0) { printf("stream failed\n"); exit(1); }
    pthread_barrier_wait(&loop2_ready);
    uint64_t ns = loop2_ns;
    void *args[1] = {&ns};
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    for (;;)
        if (cudaLaunchKernel((const void *)side_kernel, g, b, args, 0, s) != 0) { printf("launch failed\n"); exit(1); }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 4 && strcmp(argv[1], "graph") == 0) {
        void *s = 0, *graph = 0, *exec = 0;
        if (cudaStreamCreate(&s) != 0 || cudaGraphCreate(&graph, 0) != 0) { printf("graph failed\n"); return 1; }
        uint64_t ns = strtoull(argv[2], 0, 10) * 1000ull;
        void *args[1] = {&ns};
        KernelNodeParams p = {(void *)side_kernel, {1, 1, 1}, {32, 1, 1}, 0, args, 0};
        void *prev = 0;
        for (int i = 0; i < atoi(argv[3]); i++) {
            void *node = 0;
            if (cudaGraphAddKernelNode(&node, graph, prev ? &prev : 0, prev ? 1 : 0, &p) != 0) { printf("node failed\n"); return 1; }
            prev = node;
        }
        if (cudaGraphInstantiate(&exec, graph, 0) != 0) { printf("instantiate failed\n"); return 1; }
        printf("ready\n");
        for (;;)
            if (cudaGraphLaunch(exec, s) != 0) { printf("launch failed\n"); return 1; }
    }
    if (argc >= 3 && strcmp(argv[1], "loop2") == 0) {
        loop2_ns = strtoull(argv[2], 0, 10) * 1000ull;
        pthread_barrier_init(&loop2_ready, 0, 3);
        pthread_t t[2];
        for (int d = 0; d < 2; d++) pthread_create(&t[d], 0, loop2_thread, (void *)(intptr_t)d);
        pthread_barrier_wait(&loop2_ready);
        printf("ready\n");
        pthread_join(t[0], 0);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "loop") == 0) {
        void *s = 0;
        if (cudaStreamCreate(&s) != 0) { printf("stream failed\n"); return 1; }
        uint64_t ns = strtoull(argv[2], 0, 10) * 1000ull;
        long max = argc >= 4 ? atol(argv[3]) : -1;
        void *args[1] = {&ns};
        dim3 g = {1, 1, 1}, b = {32, 1, 1};
        printf("ready\n");
        for (long n = 0; max < 0 || n < max; n++)
            if (cudaLaunchKernel((const void *)side_kernel, g, b, args, 0, s) != 0) { printf("launch failed\n"); return 1; }
        cudaStreamSynchronize(s);
        printf("done %ld\n", max);
        return 0;
    }
    if (argc >= 5 && strcmp(argv[1], "pause") == 0) {
        void *s = 0;
        if (cudaStreamCreate(&s) != 0) { printf("stream failed\n"); return 1; }
        uint64_t ns = strtoull(argv[2], 0, 10) * 1000ull;
        long n = atol(argv[3]), host_ms = atol(argv[4]);
        void *args[1] = {&ns};
        dim3 g = {1, 1, 1}, b = {32, 1, 1};
        printf("ready\n");
        for (int round = 0; round < 2; round++) {
            for (long i = 0; i < n; i++)
                if (cudaLaunchKernel((const void *)side_kernel, g, b, args, 0, s) != 0) { printf("launch failed\n"); return 1; }
            if (round == 1) break;
            printf("paused\n");
            struct timespec a, z;
            clock_gettime(CLOCK_MONOTONIC, &a);
            do clock_gettime(CLOCK_MONOTONIC, &z);
            while ((z.tv_sec - a.tv_sec) * 1000 + (z.tv_nsec - a.tv_nsec) / 1000000 < host_ms);
        }
        cudaStreamSynchronize(s);
        printf("done %ld\n", 2 * n);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "bench") == 0) {
        void *s = 0;
        if (cudaStreamCreate(&s) != 0) return 1;
        uint64_t ns = 1000; void *args[1] = {&ns};
        dim3 g = {1, 1, 1}, b = {32, 1, 1};
        long n = atol(argv[2]);
        struct timespec a, z; double launch_ns = 0;
        for (long i = 0; i < n; i++) {
            clock_gettime(CLOCK_MONOTONIC, &a);
            cudaLaunchKernel((const void *)side_kernel, g, b, args, 0, s);
            clock_gettime(CLOCK_MONOTONIC, &z);
            launch_ns += (z.tv_sec - a.tv_sec) * 1e9 + (z.tv_nsec - a.tv_nsec);
            if (i % 64 == 63) cudaStreamSynchronize(s);
        }
        cudaStreamSynchronize(s);
        printf("ns_per_launch %.0f\n", launch_ns / n);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "mem") == 0) {
        void *held[64]; int nheld = 0, first = 0;
        for (int i = 2; i < argc && nheld < 64; i++) {
            if (strcmp(argv[i], "free") == 0) {
                printf("%d\n", first < nheld ? cudaFree(held[first++]) : -1);
                continue;
            }
            void *p = 0;
            int r = cudaMalloc(&p, (size_t)strtoull(argv[i], 0, 10) << 20);
            if (r == 0) held[nheld++] = p;
            printf("%d\n", r);
        }
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "hold") == 0) {
        void *p = 0;
        size_t mib = (size_t)strtoull(argv[2], 0, 10);
        int r = mib ? cudaMalloc(&p, mib << 20) : 0;
        if (argc >= 4) {
            void *s = 0;
            if (cudaStreamCreate(&s) != 0) { printf("stream failed\n"); return 1; }
            uint64_t ns = strtoull(argv[3], 0, 10) * 1000ull;
            void *args[1] = {&ns};
            dim3 g = {1, 1, 1}, b = {32, 1, 1};
            if (cudaLaunchKernel((const void *)side_kernel, g, b, args, 0, s) != 0) { printf("launch failed\n"); return 1; }
            cudaStreamSynchronize(s);
        }
        printf("held %d\n", r);
        char buf[64];
        while (fread(buf, 1, sizeof buf, stdin) > 0) {}
        return 0;
    }
    fprintf(stderr, "usage: gate_side loop <kernel_us> [n] | mem <mib|free>...\n");
    return 2;
}
