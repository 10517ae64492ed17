/* For the hook-clock test (linked against the stand-in libcudart.so.13, run under
 * LD_PRELOAD=libfreeride.so): `clock_threads <threads> <launches>` starts that many threads, each
 * with its own stream, each launching <launches> 20 µs kernels with pauses of 0.05 to 1 ms between
 * them and now and then 3 ms (so the hook clock re-anchors both while a thread is busy and after
 * it was idle). Prints "OK" when every launch succeeded. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef struct { unsigned x, y, z; } dim3;
int cudaStreamCreate(void **);
int cudaStreamSynchronize(void *);
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
static void clock_kernel(void) {}
static long launches;
static void pause_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, 0);
}
static void *worker(void *arg) {
    long k = (long)arg, bad = 0;
    void *s = 0;
    if (cudaStreamCreate(&s) != 0) return (void *)1;
    uint64_t ns = 20000;
    void *args[1] = {&ns};
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    for (long i = 0; i < launches; i++) {
        bad |= cudaLaunchKernel((const void *)clock_kernel, g, b, args, 0, s);
        pause_us(i % 40 == 39 ? 3000 : 50 + (i * 37 + k * 101) % 950);
    }
    bad |= cudaStreamSynchronize(s);
    return (void *)bad;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    launches = argc > 2 ? atol(argv[2]) : 200;
    pthread_t t[64];
    long bad = 0;
    if (n < 1 || n > 64) return 2;
    for (long i = 0; i < n; i++) pthread_create(&t[i], 0, worker, (void *)i);
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad |= (long)r;
    }
    printf("%s\n", bad ? "FAIL" : "OK");
    return bad != 0;
}
