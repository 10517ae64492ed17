/* libpipecomm.so: the NCCL-using part of pipesim-stage, like libtorch_cuda.so in PyTorch.
 * It calls NCCL through ordinary imports (DT_NEEDED libnccl.so.2, calls via the PLT), and the
 * stage opens it with dlopen(RTLD_NOW | RTLD_LOCAL), as Python opens extension modules: ncclSend
 * and friends are then mapped but not in the global scope. */
#include <stddef.h>

typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef int ncclResult_t;
typedef void *cudaStream_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *buf, size_t count, int datatype, int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *buf, size_t count, int datatype, int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuf, void *recvbuf, size_t count, int datatype, int op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuf, void *recvbuf, size_t sendcount, int datatype, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuf, void *recvbuf, size_t recvcount, int datatype, int op,
                               ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
const char *ncclGetErrorString(ncclResult_t r);

enum { ncclUint8 = 1, ncclFloat32 = 7, ncclSum = 0 };

int pc_get_unique_id(void *out128) { return ncclGetUniqueId((ncclUniqueId *)out128); }

int pc_comm_init(void **comm, int nranks, const void *id128, int rank) {
  ncclUniqueId id;
  const char *src = (const char *)id128;
  for (int i = 0; i < 128; i++) id.internal[i] = src[i];
  return ncclCommInitRank((ncclComm_t *)comm, nranks, id, rank);
}

int pc_comm_destroy(void *comm) { return ncclCommDestroy((ncclComm_t)comm); }

int pc_async_error(void *comm) {
  ncclResult_t e = 0;
  ncclResult_t r = ncclCommGetAsyncError((ncclComm_t)comm, &e);
  return r != 0 ? r : e;
}

int pc_group_start(void) { return ncclGroupStart(); }
int pc_group_end(void) { return ncclGroupEnd(); }

/* Device buffers are never touched by the stand-in: any non-NULL address will do. */
static char dummy_buffer[16];

int pc_send(void *comm, int peer, size_t bytes, void *stream) {
  return ncclSend(dummy_buffer, bytes, ncclUint8, peer, (ncclComm_t)comm, stream);
}

int pc_recv(void *comm, int peer, size_t bytes, void *stream) {
  return ncclRecv(dummy_buffer, bytes, ncclUint8, peer, (ncclComm_t)comm, stream);
}

int pc_all_reduce(void *comm, size_t bytes, void *stream) {
  return ncclAllReduce(dummy_buffer, dummy_buffer, bytes / 4, ncclFloat32, ncclSum, (ncclComm_t)comm, stream);
}

/* All-gather and reduce-scatter of a `bytes` buffer (the whole, gathered one): each rank
 * contributes (all-gather) or keeps (reduce-scatter) bytes / nranks. */
static size_t share(void *comm, size_t bytes) {
  int n = 1;
  if (ncclCommCount((ncclComm_t)comm, &n) != 0 || n < 1) n = 1;
  size_t count = bytes / 4 / (size_t)n;
  return count > 0 ? count : 1;
}

int pc_all_gather(void *comm, size_t bytes, void *stream) {
  return ncclAllGather(dummy_buffer, dummy_buffer, share(comm, bytes), ncclFloat32, (ncclComm_t)comm, stream);
}

int pc_reduce_scatter(void *comm, size_t bytes, void *stream) {
  return ncclReduceScatter(dummy_buffer, dummy_buffer, share(comm, bytes), ncclFloat32, ncclSum, (ncclComm_t)comm,
                           stream);
}

const char *pc_error_string(int r) { return ncclGetErrorString(r); }
