/* A side task on two GPUs that all-reduces between them from one process (one communicator per
 * GPU, ncclCommInitAll), for the gate tests (linked against the stand-in libcudart.so.13 and
 * libnccl.so.2, run under LD_PRELOAD=libfreeride.so with FREERIDE_ROLE=sidetask).
 *   gate_nccl <floats>: group { ncclAllReduce on GPU 0, ncclAllReduce on GPU 1 } again and
 *       again, never synchronizing; "ready" once the communicators and streams exist. */
#include <stdio.h>
#include <stdlib.h>
int cudaSetDevice(int);
int cudaStreamCreate(void **);
int ncclCommInitAll(void **, int, const int *);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclAllReduce(const void *, void *, size_t, int, int, void *, void *);
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 2) { fprintf(stderr, "usage: gate_nccl <floats>\n"); return 2; }
    size_t count = strtoull(argv[1], 0, 10);
    int devs[2] = {0, 1};
    void *comms[2] = {0, 0}, *s[2] = {0, 0};
    /* The runtime first (it initializes the driver), as a real program's framework does. */
    if (cudaSetDevice(0) != 0) { printf("no device\n"); return 1; }
    int rc = ncclCommInitAll(comms, 2, devs);
    if (rc != 0) { printf("init failed %d\n", rc); return 1; }
    for (int d = 0; d < 2; d++)
        if (cudaSetDevice(d) != 0 || cudaStreamCreate(&s[d]) != 0) { printf("stream failed\n"); return 1; }
    printf("ready\n");
    for (;;) {
        if (ncclGroupStart() != 0) return 1;
        for (int d = 0; d < 2; d++)
            if (ncclAllReduce(0, 0, count, 7 /* float */, 0 /* sum */, comms[d], s[d]) != 0) { printf("allreduce failed\n"); return 1; }
        if (ncclGroupEnd() != 0) { printf("group failed\n"); return 1; }
    }
}
