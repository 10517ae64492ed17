/* Runtime symbols (linked against libcudart.so.13): __cudaLaunchKernel (PyTorch's path),
 * cudaLaunchKernel, cudaLaunchKernelExC, cudaGraphLaunch, cudaStreamSynchronize.
 * Each runtime launch reaches the driver wrapper too: it must be recorded once. */
#include <stdio.h>
#include <stdint.h>
typedef struct { unsigned x, y, z; } dim3;
typedef struct { dim3 grid, block; size_t shmem; void *stream; void *attrs; unsigned nattrs; } cudaLaunchConfig_t;
int __cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cudaLaunchKernelExC(const cudaLaunchConfig_t *, const void *, void **);
int cudaGraphLaunch(void *, void *);
int cudaStreamSynchronize(void *);
static void kern(void) {}
int main(void) {
    dim3 g = {4, 2, 1}, b = {128, 1, 1};
    uint64_t ns = 0; void *args[1] = {&ns};
    int bad = 0;
    for (int i = 0; i < 100; i++) bad |= __cudaLaunchKernel((void *)kern, g, b, args, 0, (void *)0x10);
    for (int i = 0; i < 30; i++) bad |= cudaLaunchKernel((void *)kern, g, b, args, 64, (void *)0x20);
    cudaLaunchConfig_t c = {g, b, 0, (void *)0x30, 0, 0};
    for (int i = 0; i < 20; i++) bad |= cudaLaunchKernelExC(&c, (void *)kern, args);
    for (int i = 0; i < 5; i++) bad |= cudaGraphLaunch((void *)0x99, (void *)0x10);
    bad |= cudaStreamSynchronize((void *)0x10);
    printf("%s\n", bad ? "FAIL" : "OK");
    return bad;
}
