/* Device memory on every allocation path, for the memory tests (linked against the stand-in
 * libcudart.so.13, run under LD_PRELOAD=libfreeride.so as a trainer or a side task). Driver
 * functions come from cudaGetDriverEntryPointByVersion, as PyTorch gets them.
 *   mem_paths <path> <op>...   path: malloc | pitch | managed | async | pool | vmm
 *       op <mib>: allocate that many MiB on the path (vmm: cuMemCreate of the size rounded up to
 *                 the granularity, mapped into a reserved range) and print the result code;
 *       op free: free the oldest block still held (vmm: unmap and release) and print the code;
 *       op dev=<n>: cudaSetDevice(n) (later allocations are on device n);
 *       op host<mib>: vmm only: cuMemCreate of host memory (a host location), printed likewise;
 *       op loc=<n>: vmm only: later cuMemCreate calls name device n (the current device stays);
 *       op hold: print "held" and wait until stdin closes.
 *   mem_paths expandable <segment_mib> <rounds>: PyTorch's expandable segments: reserve a virtual
 *       range as large as the device, then grow by creating and mapping one segment after
 *       another (cuMemCreate, cuMemMap, cuMemSetAccess) until cuMemCreate fails, then
 *       empty_cache (cuMemUnmap + cuMemRelease of each). Odd rounds release each handle right
 *       after mapping it instead (as CUDA's samples do: the mapping keeps the memory). Per round
 *       prints "round <r> segments <n> rc <code> peak_used_mib <m>", the peak from cuMemGetInfo. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long u64;
int cudaSetDevice(int);
int cudaGetDevice(int *);
int cudaMalloc(void **, size_t);
int cudaMallocPitch(void **, size_t *, size_t, size_t);
int cudaMallocManaged(void **, size_t, unsigned);
int cudaMallocAsync(void **, size_t, void *);
int cudaMallocFromPoolAsync(void **, size_t, void *, void *);
int cudaFreeAsync(void *, void *);
int cudaFree(void *);
int cudaDeviceSynchronize(void);
int cudaMemGetInfo(size_t *, size_t *);
int cudaMemPoolCreate(void **, const void *);
int cudaGetDriverEntryPointByVersion(const char *, void **, unsigned, u64, int *);

typedef struct { int type, id; } Location;
typedef struct { int type, handle_types; Location loc; void *win32; unsigned char flags[8]; } AllocProp;
typedef struct { int alloc_type, handle_types; Location loc; void *win32; size_t max_size; unsigned short usage; unsigned char reserved[54]; } PoolProps;
typedef struct { Location loc; int flags; } AccessDesc;

static int (*cuMemGetAllocationGranularity)(size_t *, const AllocProp *, int);
static int (*cuMemCreate)(u64 *, size_t, const AllocProp *, u64);
static int (*cuMemRelease)(u64);
static int (*cuMemAddressReserve)(u64 *, size_t, size_t, u64, u64);
static int (*cuMemMap)(u64, size_t, size_t, u64, u64);
static int (*cuMemUnmap)(u64, size_t);
static int (*cuMemSetAccess)(u64, size_t, const AccessDesc *, size_t);

static void *entry(const char *name) {
    void *f = 0;
    int st = -1;
    if (cudaGetDriverEntryPointByVersion(name, &f, 13000, 0, &st) != 0 || !f) {
        fprintf(stderr, "no driver entry point %s\n", name);
        exit(3);
    }
    return f;
}

static void load_vmm(void) {
    cuMemGetAllocationGranularity = entry("cuMemGetAllocationGranularity");
    cuMemCreate = entry("cuMemCreate");
    cuMemRelease = entry("cuMemRelease");
    cuMemAddressReserve = entry("cuMemAddressReserve");
    cuMemMap = entry("cuMemMap");
    cuMemUnmap = entry("cuMemUnmap");
    cuMemSetAccess = entry("cuMemSetAccess");
}

/* The device later vmm allocations name (-1: the current device). */
static int loc_dev = -1;

static AllocProp prop_on(int type) {
    AllocProp p;
    memset(&p, 0, sizeof p);
    p.type = 1; /* pinned */
    p.loc.type = type;
    if (type == 1) {
        if (loc_dev >= 0) p.loc.id = loc_dev;
        else cudaGetDevice(&p.loc.id);
    }
    return p;
}

typedef struct { void *p; u64 va, handle; size_t size; int vmm; } Block;

static int expandable(size_t seg_mib, int rounds) {
    load_vmm();
    AllocProp dev = prop_on(1);
    size_t gran = 0, free_b = 0, total = 0;
    if (cuMemGetAllocationGranularity(&gran, &dev, 1) != 0) return 1;
    size_t seg = seg_mib << 20;
    if (seg % gran) { fprintf(stderr, "segment not a multiple of the granularity\n"); return 1; }
    cudaMemGetInfo(&free_b, &total);
    size_t max = total / seg + 1;
    u64 va = 0;
    if (cuMemAddressReserve(&va, max * seg, 0, 0, 0) != 0) { printf("reserve failed\n"); return 1; }
    u64 *handles = calloc(max, sizeof *handles);
    AccessDesc acc = {{1, dev.loc.id}, 3};
    for (int r = 0; r < rounds; r++) {
        size_t n = 0, peak = 0;
        int rc = 0;
        for (; n < max; n++) {
            rc = cuMemCreate(&handles[n], seg, &dev, 0);
            if (rc != 0) break;
            if (cuMemMap(va + n * seg, seg, 0, handles[n], 0) != 0) { printf("map failed\n"); return 1; }
            if (cuMemSetAccess(va + n * seg, seg, &acc, 1) != 0) { printf("access failed\n"); return 1; }
            if (r % 2 == 1 && cuMemRelease(handles[n]) != 0) { printf("release failed\n"); return 1; }
            cudaMemGetInfo(&free_b, &total);
            if (total - free_b > peak) peak = total - free_b;
        }
        printf("round %d segments %zu rc %d peak_used_mib %zu\n", r, n, rc, peak >> 20);
        for (size_t i = 0; i < n; i++) {
            if (cuMemUnmap(va + i * seg, seg) != 0) { printf("unmap failed\n"); return 1; }
            if (r % 2 == 0 && cuMemRelease(handles[i]) != 0) { printf("release failed\n"); return 1; }
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 4 && strcmp(argv[1], "expandable") == 0)
        return expandable(strtoull(argv[2], 0, 10), atoi(argv[3]));
    if (argc < 2) {
        fprintf(stderr, "usage: mem_paths malloc|pitch|managed|async|pool|vmm <mib|free|dev=N|hostMIB|hold>... | expandable <seg_mib> <rounds>\n");
        return 2;
    }
    const char *path = argv[1];
    int vmm = strcmp(path, "vmm") == 0;
    void *pool = 0;
    u64 va = 0, va_next = 0;
    size_t gran = 2 << 20;
    if (vmm) {
        load_vmm();
        AllocProp dev = prop_on(1);
        cuMemGetAllocationGranularity(&gran, &dev, 0);
        if (cuMemAddressReserve(&va, (size_t)64 << 30, 0, 0, 0) != 0) { printf("reserve failed\n"); return 1; }
        va_next = va;
    }
    Block held[64];
    int nheld = 0, first = 0;
    for (int i = 2; i < argc && nheld < 64; i++) {
        const char *op = argv[i];
        if (strcmp(op, "hold") == 0) {
            printf("held\n");
            char buf[64];
            while (fread(buf, 1, sizeof buf, stdin) > 0) {}
            continue;
        }
        if (strncmp(op, "loc=", 4) == 0) {
            loc_dev = atoi(op + 4);
            printf("0\n");
            continue;
        }
        if (strncmp(op, "dev=", 4) == 0) {
            printf("%d\n", cudaSetDevice(atoi(op + 4)));
            continue;
        }
        if (strcmp(op, "free") == 0) {
            if (first >= nheld) { printf("-1\n"); continue; }
            Block *b = &held[first++];
            int r;
            if (b->vmm) {
                r = cuMemUnmap(b->va, b->size);
                if (r == 0) r = cuMemRelease(b->handle);
            } else if (strcmp(path, "async") == 0 || strcmp(path, "pool") == 0) {
                r = cudaFreeAsync(b->p, 0);
                if (r == 0) r = cudaDeviceSynchronize();
            } else {
                r = cudaFree(b->p);
            }
            printf("%d\n", r);
            continue;
        }
        int host = strncmp(op, "host", 4) == 0;
        size_t mib = strtoull(host ? op + 4 : op, 0, 10);
        size_t bytes = mib << 20;
        Block b = {0, 0, 0, bytes, vmm};
        int r;
        if (vmm) {
            AllocProp p = prop_on(host ? 2 : 1);
            size_t size = (bytes + gran - 1) / gran * gran;
            b.size = size;
            r = cuMemCreate(&b.handle, size, &p, 0);
            if (r == 0 && !host) {
                b.va = va_next;
                va_next += size;
                r = cuMemMap(b.va, size, 0, b.handle, 0);
                AccessDesc acc = {{1, p.loc.id}, 3};
                if (r == 0) r = cuMemSetAccess(b.va, size, &acc, 1);
            } else if (r == 0) {
                printf("%d\n", cuMemRelease(b.handle));
                continue;
            }
        } else if (strcmp(path, "malloc") == 0) {
            r = cudaMalloc(&b.p, bytes);
        } else if (strcmp(path, "pitch") == 0) {
            size_t pitch = 0;
            r = cudaMallocPitch(&b.p, &pitch, 1 << 20, mib);
        } else if (strcmp(path, "managed") == 0) {
            r = cudaMallocManaged(&b.p, bytes, 1);
        } else if (strcmp(path, "async") == 0) {
            r = cudaMallocAsync(&b.p, bytes, 0);
        } else if (strcmp(path, "pool") == 0) {
            if (!pool) {
                PoolProps pp;
                memset(&pp, 0, sizeof pp);
                pp.alloc_type = 1;
                pp.loc.type = 1;
                cudaGetDevice(&pp.loc.id);
                if (cudaMemPoolCreate(&pool, &pp) != 0) { printf("pool failed\n"); return 1; }
            }
            r = cudaMallocFromPoolAsync(&b.p, bytes, pool, 0);
        } else {
            fprintf(stderr, "unknown path %s\n", path);
            return 2;
        }
        if (r == 0) held[nheld++] = b;
        printf("%d\n", r);
    }
    return 0;
}
