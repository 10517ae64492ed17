/* Which stream waits for what, on two GPUs from one process (one communicator per GPU,
 * ncclCommInitAll), as PyTorch's ProcessGroupNCCL does it: per GPU a compute stream and a comm
 * stream; each round a group of one all-reduce per GPU on the comm streams, then on each GPU the
 * comm stream's event recorded and the compute stream made to wait for it (timed: it follows
 * communication), and the compute stream's event recorded and the comm stream made to wait for
 * it (not timed: no communication before it). Linked against the stand-in libcudart.so.13 and
 * libnccl.so.2; run under LD_PRELOAD=libfreeride.so. Prints "OK" at the end. With "synced", each
 * GPU is synchronized after the group, before its events are recorded: the compute stream's wait
 * is then on communication that has ended (not worth timing). With "marks", after the rounds,
 * on GPU 0: a kernel on the compute stream, then the host blocks on the comm stream (a drain mark
 * is due on the compute stream); a kernel, then the host blocks on the compute stream itself; a
 * kernel, then the device is synchronized (no mark due for either); then a burst of ten kernels
 * each followed by a block on the comm stream (marks are rate-limited).
 *   stream_waits <rounds> [synced|marks] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int cudaSetDevice(int);
int cudaStreamCreate(void **);
int cudaEventCreate(void **);
int cudaEventRecord(void *, void *);
int cudaEventRecordWithFlags(void *, void *, unsigned);
int cudaStreamWaitEvent(void *, void *, unsigned);
int cudaDeviceSynchronize(void);
int cudaStreamSynchronize(void *);
typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
static void kernel(void) {}
/* One 2 ms kernel (the stand-in's first argument: its duration) on `s`. */
static int launch(void *s) {
    unsigned long long ns = 2000000ull;
    void *args[1] = {&ns};
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    return cudaLaunchKernel((const void *)kernel, g, b, args, 0, s);
}
int ncclCommInitAll(void **, int, const int *);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclAllReduce(const void *, void *, size_t, int, int, void *, void *);
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    int synced = argc > 2 && strcmp(argv[2], "synced") == 0;
    int marks = argc > 2 && strcmp(argv[2], "marks") == 0;
    int devs[2] = {0, 1};
    void *comms[2] = {0, 0}, *compute[2] = {0, 0}, *comm[2] = {0, 0}, *done[2] = {0, 0}, *ready[2] = {0, 0};
    if (cudaSetDevice(0) != 0) { printf("no device\n"); return 1; }
    int rc = ncclCommInitAll(comms, 2, devs);
    if (rc != 0) { printf("init failed %d\n", rc); return 1; }
    for (int d = 0; d < 2; d++)
        if (cudaSetDevice(d) != 0 || cudaStreamCreate(&compute[d]) != 0 || cudaStreamCreate(&comm[d]) != 0
            || cudaEventCreate(&done[d]) != 0 || cudaEventCreate(&ready[d]) != 0) {
            printf("setup failed\n");
            return 1;
        }
    for (int r = 0; r < rounds; r++) {
        if (ncclGroupStart() != 0) return 1;
        for (int d = 0; d < 2; d++)
            if (ncclAllReduce(0, 0, 1 << 16, 7 /* float */, 0 /* sum */, comms[d], comm[d]) != 0) { printf("allreduce failed\n"); return 1; }
        if (ncclGroupEnd() != 0) { printf("group failed\n"); return 1; }
        for (int d = 0; d < 2; d++) {
            if (cudaSetDevice(d) != 0) return 1;
            if (synced && cudaDeviceSynchronize() != 0) { printf("sync failed\n"); return 1; }
            if (cudaEventRecord(done[d], comm[d]) != 0) { printf("record failed\n"); return 1; }
            if (cudaStreamWaitEvent(compute[d], done[d], 0) != 0) { printf("wait failed\n"); return 1; }
            if (cudaEventRecordWithFlags(ready[d], compute[d], 0) != 0) { printf("record failed\n"); return 1; }
            if (cudaStreamWaitEvent(comm[d], ready[d], 0) != 0) { printf("wait failed\n"); return 1; }
        }
    }
    for (int d = 0; d < 2; d++)
        if (cudaSetDevice(d) != 0 || cudaDeviceSynchronize() != 0) { printf("sync failed\n"); return 1; }
    if (marks) {
        if (cudaSetDevice(0) != 0) return 1;
        if (launch(compute[0]) != 0 || cudaStreamSynchronize(comm[0]) != 0) { printf("marks failed\n"); return 1; }
        if (launch(compute[0]) != 0 || cudaStreamSynchronize(compute[0]) != 0) { printf("marks failed\n"); return 1; }
        if (launch(compute[0]) != 0 || cudaDeviceSynchronize() != 0) { printf("marks failed\n"); return 1; }
        /* A burst: ten blocks on the comm stream, each after a kernel, within about a millisecond. */
        for (int i = 0; i < 10; i++)
            if (launch(compute[0]) != 0 || cudaStreamSynchronize(comm[0]) != 0) { printf("marks failed\n"); return 1; }
        if (cudaDeviceSynchronize() != 0) { printf("sync failed\n"); return 1; }
    }
    printf("OK\n");
    return 0;
}
