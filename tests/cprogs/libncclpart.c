/* The NCCL-using part of a "framework", loaded by the program with dlopen(RTLD_LOCAL) like
 * Python loads torch: libnccl.so.2 is then not in the global scope (the trap). */
#include <stddef.h>
int ncclSend(const void *, size_t, int, int, void *, void *);
int ncclRecv(void *, size_t, int, int, void *, void *);
int ncclAllReduce(const void *, void *, size_t, int, int, void *, void *);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int part_run(void) {
    int r = 0;
    void *comm = (void *)0xc0;
    for (int i = 0; i < 3; i++) r |= ncclSend(0, 1024, 7 /* float32 */, 1, comm, (void *)0x80); /* 4096 B */
    for (int i = 0; i < 2; i++) r |= ncclRecv(0, 256, 9 /* bf16 */, 2, comm, (void *)0x81);      /* 512 B */
    r |= ncclGroupStart();
    r |= ncclSend(0, 10, 4 /* int64 */, 3, comm, (void *)0x80);
    r |= ncclRecv(0, 10, 4, 3, comm, (void *)0x82);
    r |= ncclGroupEnd();
    r |= ncclAllReduce(0, 0, 100, 7, 0, comm, (void *)0x80);
    return r;
}
