/* Tiny fake libcuda.so.1 for the interposer's own tests (independent of the test bed).
 * Counts launches and simulates per-stream completion times so events complete like CUDA's:
 * a launch whose kernelParams[0] points to a uint64_t runs that many ns after the stream's
 * previous work. Kernels get start/end times; FAKE_GT=path appends one line per kernel. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef struct { unsigned gx, gy, gz, bx, by, bz, shmem; void *stream; void *attrs; unsigned nattrs; } CUlaunchConfig;

static uint64_t busy[64];
long fake_launches = 0, fake_graph_launches = 0;

static uint64_t now_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
static int sidx(void *s) { return (int)(((uintptr_t)s) % 64); }

static void run_kernel(void *stream, void **params, const char *api) {
    uint64_t dur = 0;
    if (params && params[0]) dur = *(uint64_t *)params[0];
    /* lock-free (async-signal-safe): the signal test launches from a handler */
    uint64_t t = now_ns(), i = sidx(stream), old, start;
    do {
        old = __atomic_load_n(&busy[i], __ATOMIC_ACQUIRE);
        start = old > t ? old : t;
    } while (!__atomic_compare_exchange_n(&busy[i], &old, start + dur, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    __sync_fetch_and_add(&fake_launches, 1);
    const char *gt = getenv("FAKE_GT");
    if (gt) {
        FILE *f = fopen(gt, "a");
        if (f) {
            fprintf(f, "{\"pid\":%d,\"stream\":%lu,\"api\":\"%s\",\"start_ns\":%lu,\"end_ns\":%lu}\n", getpid(),
                    (unsigned long)(uintptr_t)stream, api, (unsigned long)start, (unsigned long)(start + dur));
            fclose(f);
        }
    }
}

long fake_cuda_launch_count(void) { return fake_launches; }

CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void *s, void **p, void **e) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sh; (void)e;
    run_kernel(s, p, "cuLaunchKernel"); return 0;
}
CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned sh, void *s, void **p, void **e) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, void *f, void **p, void **e) {
    (void)f; (void)e; run_kernel(c ? c->stream : 0, p, "cuLaunchKernelEx"); return 0;
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, void *f, void **p, void **e) { return cuLaunchKernelEx(c, f, p, e); }
CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned sh, void *s, void **p) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sh;
    run_kernel(s, p, "cuLaunchCooperativeKernel"); return 0;
}
CUresult cuGraphLaunch(void *g, void *s) { (void)g; run_kernel(s, 0, "cuGraphLaunch"); fake_graph_launches++; return 0; }
CUresult cuGraphLaunch_ptsz(void *g, void *s) { return cuGraphLaunch(g, s); }
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) { void *m = malloc(n ? n : 1); *p = (uint64_t)(uintptr_t)m; return m ? 0 : 2; }
CUresult cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); return 0; }
CUresult cuMemAllocAsync(uint64_t *p, size_t n, void *s) { (void)s; return cuMemAlloc_v2(p, n); }
CUresult cuCtxGetCurrent(void **c) { *c = (void *)0x1234; return 0; }
CUresult cuCtxSetCurrent(void *c) { (void)c; return 0; }
CUresult cuCtxPushCurrent_v2(void *c) { (void)c; return 0; }
CUresult cuCtxPopCurrent_v2(void **c) { if (c) *c = (void *)0x1234; return 0; }
CUresult cuCtxGetDevice(int *d) { const char *e = getenv("FAKE_DEVICE"); *d = e ? atoi(e) : 0; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
/* Device d is at PCI bus 0x20 + d (FAKE_DEVICE names the ordinal a context is on). */
CUresult cuDeviceGetPCIBusId(char *b, int len, int d) { snprintf(b, (size_t)len, "0000:%02x:00.0", 0x20 + d); return 0; }
CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }
/* FAKE_CAPTURING=1: every stream is being captured into a graph. */
CUresult cuStreamIsCapturing(void *s, int *st) { (void)s; *st = getenv("FAKE_CAPTURING") ? 1 : 0; return 0; }

typedef struct { uint64_t t; } Ev;
CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; *e = calloc(1, sizeof(Ev)); return 0; }
CUresult cuEventRecord(void *e, void *s) {
    uint64_t t = now_ns(), b = __atomic_load_n(&busy[sidx(s)], __ATOMIC_ACQUIRE);
    __atomic_store_n(&((Ev *)e)->t, b > t ? b : t, __ATOMIC_RELEASE);
    return 0;
}
CUresult cuEventQuery(void *e) { return now_ns() >= __atomic_load_n(&((Ev *)e)->t, __ATOMIC_ACQUIRE) ? 0 : 600; }
CUresult cuEventSynchronize(void *e) { while (cuEventQuery(e)) ; return 0; }

struct ent { const char *name; int ptsz; void *fn; };
static struct ent table[] = {
    {"cuLaunchKernel", 0, (void *)cuLaunchKernel}, {"cuLaunchKernel", 1, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 0, (void *)cuLaunchKernelEx}, {"cuLaunchKernelEx", 1, (void *)cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", -1, (void *)cuLaunchCooperativeKernel},
    {"cuGraphLaunch", 0, (void *)cuGraphLaunch}, {"cuGraphLaunch", 1, (void *)cuGraphLaunch_ptsz},
    {"cuMemAlloc", -1, (void *)cuMemAlloc_v2}, {"cuMemFree", -1, (void *)cuMemFree_v2},
    {"cuMemAllocAsync", -1, (void *)cuMemAllocAsync},
    {"cuCtxGetCurrent", -1, (void *)cuCtxGetCurrent}, {"cuCtxSetCurrent", -1, (void *)cuCtxSetCurrent},
    {"cuCtxGetDevice", -1, (void *)cuCtxGetDevice}, {"cuCtxSynchronize", -1, (void *)cuCtxSynchronize},
    {"cuStreamSynchronize", -1, (void *)cuStreamSynchronize},
    {"cuEventCreate", -1, (void *)cuEventCreate}, {"cuEventRecord", -1, (void *)cuEventRecord},
    {"cuEventQuery", -1, (void *)cuEventQuery}, {"cuInit", -1, (void *)cuInit},
};
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags);
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *status);
static CUresult lookup(const char *sym, void **pfn, int ver, unsigned long long flags) {
    int want = (flags & 2) ? 1 : 0;
    if (!strcmp(sym, "cuGetProcAddress")) {
        *pfn = ver >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
        return 0;
    }
    for (unsigned i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(table[i].name, sym) && (table[i].ptsz < 0 || table[i].ptsz == want)) { *pfn = table[i].fn; return 0; }
    *pfn = 0;
    return 500;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) { return lookup(sym, pfn, ver, flags); }
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *status) {
    CUresult r = lookup(sym, pfn, ver, flags);
    if (status) *status = r ? 1 : 0;
    return r;
}
