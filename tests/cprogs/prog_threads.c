/* Many producers: 8 threads launching through __cudaLaunchKernel at once. */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
typedef struct { unsigned x, y, z; } dim3;
int __cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
static void *worker(void *arg) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    uint64_t ns = 0; void *p[1] = {&ns};
    for (int i = 0; i < 2000; i++) __cudaLaunchKernel((void *)worker, g, b, p, 0, arg);
    return 0;
}
int main(void) {
    pthread_t t[8];
    for (long i = 0; i < 8; i++) pthread_create(&t[i], 0, worker, (void *)(0x100 + i));
    for (int i = 0; i < 8; i++) pthread_join(t[i], 0);
    printf("OK\n");
    return 0;
}
