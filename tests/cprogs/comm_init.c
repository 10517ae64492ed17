/* Communicators made every way NCCL makes them, for the comm_init records (tests/integration/tests/
 * comm_init.rs). Linked against the stand-in libcudart.so.13 and libnccl.so.2; run under
 * LD_PRELOAD=libfreeride.so.
 *   comm_init ids                  prints two ncclUniqueIds in hex, one a line
 *   comm_init rank <r> <idA> <idB> rank r of 2 (on device r): A by ncclCommInitRank, B by
 *                                  ncclCommInitRankConfig, then splits of A: S1 (colour 0 for
 *                                  both, key -r: ranks reversed), S2 (colour r: alone), S3 (colour 7
 *                                  on rank 0, NCCL_SPLIT_NOCOLOR on rank 1); an all-reduce on A,
 *                                  B and S1. Prints "OK A B S1 S2 S3" (handles, S3 0 on rank 1).
 *   comm_init all                  two ncclCommInitAll of devices 0 and 1, an all-reduce on each
 *                                  communicator. Prints "OK c0 c1 c2 c3" (handles). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
int cudaSetDevice(int);
int cudaStreamCreate(void **);
int cudaDeviceSynchronize(void);
int ncclGetUniqueId(ncclUniqueId *);
int ncclCommInitRank(void **, int, ncclUniqueId, int);
int ncclCommInitRankConfig(void **, int, ncclUniqueId, int, void *);
int ncclCommInitAll(void **, int, const int *);
int ncclCommSplit(void *, int, int, void **, void *);
int ncclCommDestroy(void *);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclAllReduce(const void *, void *, size_t, int, int, void *, void *);

static int fail(const char *what, int rc) {
    printf("%s failed %d\n", what, rc);
    return 1;
}

static void hex_of(const ncclUniqueId *id, char *out) {
    for (int i = 0; i < 128; i++) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static int id_of(const char *hex, ncclUniqueId *id) {
    if (strlen(hex) != 256) return 0;
    for (int i = 0; i < 128; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return 0;
        id->internal[i] = (char)v;
    }
    return 1;
}

static int allreduce(void *comm, void *stream) {
    return ncclAllReduce(0, 0, 1 << 10, 7 /* float */, 0 /* sum */, comm, stream);
}

static int ranks(int r, const char *a_hex, const char *b_hex) {
    ncclUniqueId a_id, b_id;
    if (!id_of(a_hex, &a_id) || !id_of(b_hex, &b_id)) return fail("id", 0);
    void *a = 0, *b = 0, *s1 = 0, *s2 = 0, *s3 = 0, *stream = 0;
    int rc;
    /* An opaque config as the caller owns it (the stand-in ignores it). */
    uint64_t config[8] = {sizeof config, 0x9ce4, 22809, 1, 0, 0, 0, 0};
    if ((rc = cudaSetDevice(r)) != 0) return fail("cudaSetDevice", rc);
    if ((rc = cudaStreamCreate(&stream)) != 0) return fail("cudaStreamCreate", rc);
    if ((rc = ncclCommInitRank(&a, 2, a_id, r)) != 0) return fail("ncclCommInitRank", rc);
    if ((rc = ncclCommInitRankConfig(&b, 2, b_id, r, config)) != 0) return fail("ncclCommInitRankConfig", rc);
    if ((rc = ncclCommSplit(a, 0, -r, &s1, 0)) != 0 || !s1) return fail("split 1", rc);
    if ((rc = ncclCommSplit(a, r, 0, &s2, 0)) != 0 || !s2) return fail("split 2", rc);
    if ((rc = ncclCommSplit(a, r == 0 ? 7 : -1, 0, &s3, 0)) != 0 || (r == 0) != (s3 != 0)) return fail("split 3", rc);
    if ((rc = allreduce(a, stream)) != 0) return fail("all-reduce A", rc);
    if ((rc = allreduce(b, stream)) != 0) return fail("all-reduce B", rc);
    if ((rc = allreduce(s1, stream)) != 0) return fail("all-reduce S1", rc);
    if ((rc = cudaDeviceSynchronize()) != 0) return fail("sync", rc);
    printf("OK %lu %lu %lu %lu %lu\n", (unsigned long)a, (unsigned long)b, (unsigned long)s1, (unsigned long)s2,
           (unsigned long)s3);
    void *all[5] = {a, b, s1, s2, s3};
    for (int i = 0; i < 5; i++)
        if (all[i] && (rc = ncclCommDestroy(all[i])) != 0) return fail("ncclCommDestroy", rc);
    return 0;
}

static int local(void) {
    int devs[2] = {0, 1};
    void *comms[4] = {0, 0, 0, 0}, *streams[2] = {0, 0};
    int rc;
    if ((rc = cudaSetDevice(0)) != 0) return fail("cudaSetDevice", rc);
    if ((rc = ncclCommInitAll(comms, 2, devs)) != 0) return fail("ncclCommInitAll", rc);
    if ((rc = ncclCommInitAll(comms + 2, 2, devs)) != 0) return fail("ncclCommInitAll", rc);
    for (int d = 0; d < 2; d++)
        if ((rc = cudaSetDevice(d)) != 0 || (rc = cudaStreamCreate(&streams[d])) != 0) return fail("stream", rc);
    for (int k = 0; k < 2; k++) {
        if ((rc = ncclGroupStart()) != 0) return fail("ncclGroupStart", rc);
        for (int d = 0; d < 2; d++)
            if ((rc = allreduce(comms[2 * k + d], streams[d])) != 0) return fail("all-reduce", rc);
        if ((rc = ncclGroupEnd()) != 0) return fail("ncclGroupEnd", rc);
    }
    for (int d = 0; d < 2; d++)
        if ((rc = cudaSetDevice(d)) != 0 || (rc = cudaDeviceSynchronize()) != 0) return fail("sync", rc);
    printf("OK %lu %lu %lu %lu\n", (unsigned long)comms[0], (unsigned long)comms[1], (unsigned long)comms[2],
           (unsigned long)comms[3]);
    for (int i = 0; i < 4; i++)
        if ((rc = ncclCommDestroy(comms[i])) != 0) return fail("ncclCommDestroy", rc);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 2 && strcmp(argv[1], "ids") == 0) {
        for (int i = 0; i < 2; i++) {
            ncclUniqueId id;
            char hex[257];
            int rc = ncclGetUniqueId(&id);
            if (rc != 0) return fail("ncclGetUniqueId", rc);
            hex_of(&id, hex);
            printf("%s\n", hex);
        }
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "rank") == 0) return ranks(atoi(argv[2]), argv[3], argv[4]);
    if (argc == 2 && strcmp(argv[1], "all") == 0) return local();
    printf("usage: comm_init ids | rank <r> <idA> <idB> | all\n");
    return 2;
}
