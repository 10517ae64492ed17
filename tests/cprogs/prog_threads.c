/* Many producers: 8 threads launching through __cudaLaunchKernel at once; with "churn", 12
 * threads one after another (each ends before the next starts), 100 launches each. */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
typedef struct { unsigned x, y, z; } dim3;
int __cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
static int launches = 2000;
static void *worker(void *arg) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    uint64_t ns = 0; void *p[1] = {&ns};
    for (int i = 0; i < launches; i++) __cudaLaunchKernel((void *)worker, g, b, p, 0, arg);
    return 0;
}
int main(int argc, char **argv) {
    pthread_t t[12];
    if (argc > 1 && strcmp(argv[1], "churn") == 0) {
        launches = 100;
        for (long i = 0; i < 12; i++) {
            pthread_create(&t[i], 0, worker, (void *)(0x100 + i));
            pthread_join(t[i], 0);
        }
    } else {
        for (long i = 0; i < 8; i++) pthread_create(&t[i], 0, worker, (void *)(0x100 + i));
        for (int i = 0; i < 8; i++) pthread_join(t[i], 0);
    }
    printf("OK\n");
    return 0;
}
