/* Tiny fake libcudart.so.13: reaches the driver only through cuGetProcAddress_v2 pointers,
 * obtained with dlopen("libcuda.so.1") + dlsym, like the real runtime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct { unsigned x, y, z; } dim3;
typedef struct { dim3 grid, block; size_t shmem; void *stream; void *attrs; unsigned nattrs; } cudaLaunchConfig_t;
typedef int (*getproc_t)(const char *, void **, int, unsigned long long, int *);
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
typedef int (*graph_t)(void *, void *);
typedef int (*sync_t)(void *);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static launch_t drv_launch;
static graph_t drv_graph;
static sync_t drv_sync;
static void init(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) abort();
    getproc_t gp = (getproc_t)dlsym(h, "cuGetProcAddress_v2");
    if (!gp) abort();
    gp("cuLaunchKernel", (void **)&drv_launch, 13000, 0, 0);
    gp("cuGraphLaunch", (void **)&drv_graph, 13000, 0, 0);
    gp("cuStreamSynchronize", (void **)&drv_sync, 13000, 0, 0);
}
static int launch(const void *f, dim3 g, dim3 b, void **args, size_t sh, void *s) {
    pthread_once(&once, init);
    return drv_launch((void *)f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)sh, s, args, 0);
}
int __cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t sh, void *s) { return launch(f, g, b, args, sh, s); }
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t sh, void *s) { return launch(f, g, b, args, sh, s); }
int cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *f, void **args) {
    return launch(f, c->grid, c->block, args, c->shmem, c->stream);
}
int cudaGraphLaunch(void *g, void *s) { pthread_once(&once, init); return drv_graph(g, s); }
int cudaStreamSynchronize(void *s) { pthread_once(&once, init); return drv_sync(s); }
int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
int cudaGetDriverEntryPointByVersion(const char *sym, void **pfn, unsigned ver, unsigned long long flags, int *st) {
    pthread_once(&once, init);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    getproc_t gp = (getproc_t)dlsym(h, "cuGetProcAddress_v2");
    return gp(sym, pfn, (int)ver, flags, st);
}
int cudaGetDriverEntryPoint(const char *sym, void **pfn, unsigned long long flags, int *st) {
    return cudaGetDriverEntryPointByVersion(sym, pfn, 13000, flags, st);
}
