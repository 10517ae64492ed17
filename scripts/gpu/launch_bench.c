/* The host cost of a kernel launch on the real driver, with and without freeride (part 2b of the
 * GPU check, scripts/gpu/hook_cost.py): 1, 2 and 4 threads, each on its own non-blocking stream of
 * the device's primary context, launch an empty kernel (PTX, JIT-compiled by the driver) in rounds
 * of --batch launches; a round's time is taken around the launches only (then the stream is
 * synchronized, outside the timing), so the launch queue never fills and what is timed is the
 * host's cost of cuLaunchKernel, not the GPU's. Per thread the median round; printed: one JSON
 * line per thread count with the mean over threads of the median ns per launch.
 *
 * Reaches the driver as Triton does: dlopen("libcuda.so.1") + dlsym, so under LD_PRELOAD the
 * launch goes through freeride's driver wrapper. No CUDA headers: the few prototypes are below.
 * Build: cc -O2 -o launch_bench launch_bench.c -ldl -lpthread
 * Usage: launch_bench [rounds (default 300)] [batch (default 500)] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void **, void **);

static const char PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry noop()\n{\n\tret;\n}\n";

static CUcontext ctx;
static CUfunction fn;
static int rounds = 300, batch = 500;
static pthread_barrier_t barrier;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != 0) {                                                                             \
            fprintf(stderr, "launch_bench: %s failed: %d\n", #call, r_);                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* One thread: the median ns per launch of its rounds. */
static void *worker(void *out) {
    CUstream s;
    CHECK(p_cuCtxSetCurrent(ctx));
    CHECK(p_cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */));
    uint64_t *per = calloc((size_t)rounds, sizeof *per);
    for (int i = 0; i < 20; i++) /* warm-up */
        CHECK(p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    CHECK(p_cuStreamSynchronize(s));
    pthread_barrier_wait(&barrier);
    for (int r = 0; r < rounds; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < batch; i++)
            CHECK(p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        per[r] = now_ns() - t0;
        CHECK(p_cuStreamSynchronize(s));
    }
    qsort(per, (size_t)rounds, sizeof *per, cmp_u64);
    *(double *)out = (double)per[rounds / 2] / batch;
    free(per);
    CHECK(p_cuStreamDestroy(s));
    return NULL;
}

#define LOAD(name)                                                                                 \
    do {                                                                                           \
        *(void **)&p_##name = dlsym(lib, #name);                                                   \
        if (!p_##name) {                                                                           \
            fprintf(stderr, "launch_bench: no %s\n", #name);                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    if (argc > 2) batch = atoi(argv[2]);
    if (rounds < 1 || batch < 1) return 2;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "launch_bench: %s\n", dlerror());
        return 1;
    }
    LOAD(cuInit);
    LOAD(cuDeviceGet);
    LOAD(cuDevicePrimaryCtxRetain);
    LOAD(cuCtxSetCurrent);
    LOAD(cuModuleLoadData);
    LOAD(cuModuleGetFunction);
    LOAD(cuStreamCreate);
    LOAD(cuStreamSynchronize);
    LOAD(cuStreamDestroy);
    *(void **)&p_cuLaunchKernel = dlsym(lib, "cuLaunchKernel");
    if (!p_cuLaunchKernel) return 1;
    CUdevice dev;
    CUmodule mod;
    CHECK(p_cuInit(0));
    CHECK(p_cuDeviceGet(&dev, 0));
    CHECK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(p_cuCtxSetCurrent(ctx));
    CHECK(p_cuModuleLoadData(&mod, PTX));
    CHECK(p_cuModuleGetFunction(&fn, mod, "noop"));
    const int counts[] = {1, 2, 4};
    for (unsigned c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        int n = counts[c];
        pthread_t th[4];
        double res[4];
        pthread_barrier_init(&barrier, NULL, (unsigned)n);
        for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, worker, &res[i]);
        double sum = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            sum += res[i];
        }
        pthread_barrier_destroy(&barrier);
        printf("{\"threads\": %d, \"ns_per_launch\": %.1f, \"rounds\": %d, \"batch\": %d}\n", n, sum / n, rounds,
               batch);
        fflush(stdout);
    }
    return 0;
}
