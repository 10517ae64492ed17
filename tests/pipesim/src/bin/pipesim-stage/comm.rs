//! NCCL, reached as PyTorch reaches it: through a library (`libpipecomm.so`, DT_NEEDED
//! libnccl.so.2) that the stage opens with `dlopen(RTLD_NOW | RTLD_LOCAL)`, so NCCL's symbols are
//! not in the global scope. Unique ids travel through files in the job folder (the "store").
use pipesim::program::CollKind;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::Path;
use std::time::{Duration, Instant};

type Fn0 = unsafe extern "C" fn() -> c_int;
type GetId = unsafe extern "C" fn(*mut c_void) -> c_int;
type Init = unsafe extern "C" fn(*mut *mut c_void, c_int, *const c_void, c_int) -> c_int;
type CommFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type P2p = unsafe extern "C" fn(*mut c_void, c_int, usize, *mut c_void) -> c_int;
type AllReduce = unsafe extern "C" fn(*mut c_void, usize, *mut c_void) -> c_int;
type ErrStr = unsafe extern "C" fn(c_int) -> *const c_char;

/// The functions of libpipecomm.so.
pub struct PipeComm {
    get_id: GetId,
    init: Init,
    destroy: CommFn,
    async_error: CommFn,
    group_start: Fn0,
    group_end: Fn0,
    send: P2p,
    recv: P2p,
    all_reduce: AllReduce,
    all_gather: AllReduce,
    reduce_scatter: AllReduce,
    err_str: ErrStr,
}

/// A communicator handle.
#[derive(Clone, Copy)]
pub struct Comm(*mut c_void);

impl PipeComm {
    /// `dlopen("libpipecomm.so", RTLD_NOW | RTLD_LOCAL)` (found through LD_LIBRARY_PATH).
    pub fn load() -> Result<PipeComm, String> {
        // SAFETY: dlopen/dlsym with static names; the library stays loaded; each pointer is cast
        // to the signature csrc/pipecomm.c defines for that name.
        unsafe {
            let h = libc::dlopen(
                c"libpipecomm.so".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            );
            if h.is_null() {
                let e = libc::dlerror();
                let msg = if e.is_null() {
                    "?".into()
                } else {
                    CStr::from_ptr(e).to_string_lossy().into_owned()
                };
                return Err(format!("dlopen(libpipecomm.so): {msg}"));
            }
            let sym = |n: &CStr| {
                let p = libc::dlsym(h, n.as_ptr());
                if p.is_null() {
                    Err(format!("libpipecomm.so lacks {}", n.to_string_lossy()))
                } else {
                    Ok(p)
                }
            };
            use std::mem::transmute as t;
            Ok(PipeComm {
                get_id: t::<*mut c_void, GetId>(sym(c"pc_get_unique_id")?),
                init: t::<*mut c_void, Init>(sym(c"pc_comm_init")?),
                destroy: t::<*mut c_void, CommFn>(sym(c"pc_comm_destroy")?),
                async_error: t::<*mut c_void, CommFn>(sym(c"pc_async_error")?),
                group_start: t::<*mut c_void, Fn0>(sym(c"pc_group_start")?),
                group_end: t::<*mut c_void, Fn0>(sym(c"pc_group_end")?),
                send: t::<*mut c_void, P2p>(sym(c"pc_send")?),
                recv: t::<*mut c_void, P2p>(sym(c"pc_recv")?),
                all_reduce: t::<*mut c_void, AllReduce>(sym(c"pc_all_reduce")?),
                all_gather: t::<*mut c_void, AllReduce>(sym(c"pc_all_gather")?),
                reduce_scatter: t::<*mut c_void, AllReduce>(sym(c"pc_reduce_scatter")?),
                err_str: t::<*mut c_void, ErrStr>(sym(c"pc_error_string")?),
            })
        }
    }

    fn check(&self, what: &str, r: c_int) -> Result<(), String> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static string.
        let msg = unsafe {
            let p = (self.err_str)(r);
            if p.is_null() {
                "?".into()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(format!("{what} failed: {r} ({msg})"))
    }

    /// Joins communicator `name` as `rank` of `nranks`; rank 0 makes the id and publishes it in
    /// `job_dir` (write to a temporary file, then rename), the others wait for it.
    pub fn init(
        &self,
        job_dir: &Path,
        name: &str,
        nranks: usize,
        rank: usize,
    ) -> Result<Comm, String> {
        let path = job_dir.join(format!("{name}.id"));
        let mut id = [0u8; 128];
        if rank == 0 {
            // SAFETY: id has the 128 bytes of an ncclUniqueId.
            self.check("ncclGetUniqueId", unsafe {
                (self.get_id)(id.as_mut_ptr().cast())
            })?;
            let tmp = job_dir.join(format!(".{name}.id.{}", std::process::id()));
            std::fs::write(&tmp, id).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, &path)
                .map_err(|e| format!("publishing {}: {e}", path.display()))?;
        } else {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if let Ok(b) = std::fs::read(&path) {
                    if b.len() == 128 {
                        id.copy_from_slice(&b);
                        break;
                    }
                }
                if Instant::now() > deadline {
                    return Err(format!("no NCCL id at {} after 120 s", path.display()));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let mut comm = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; id is 128 bytes.
        let r = unsafe {
            (self.init)(
                &mut comm,
                nranks as c_int,
                id.as_ptr().cast(),
                rank as c_int,
            )
        };
        self.check(&format!("ncclCommInitRank({name})"), r)?;
        Ok(Comm(comm))
    }

    pub fn destroy(&self, c: Comm) {
        // SAFETY: c came from init and is destroyed once.
        unsafe { (self.destroy)(c.0) };
    }

    pub fn async_error(&self, c: Comm) -> Result<(), String> {
        // SAFETY: c is a live communicator.
        self.check("ncclCommGetAsyncError", unsafe { (self.async_error)(c.0) })
    }

    pub fn group_start(&self) -> Result<(), String> {
        // SAFETY: no arguments.
        self.check("ncclGroupStart", unsafe { (self.group_start)() })
    }

    pub fn group_end(&self) -> Result<(), String> {
        // SAFETY: no arguments.
        self.check("ncclGroupEnd", unsafe { (self.group_end)() })
    }

    pub fn send(
        &self,
        c: Comm,
        peer: usize,
        bytes: u64,
        stream: *mut c_void,
    ) -> Result<(), String> {
        // SAFETY: c is live; the stream is a runtime stream handle.
        self.check("ncclSend", unsafe {
            (self.send)(c.0, peer as c_int, bytes as usize, stream)
        })
    }

    pub fn recv(
        &self,
        c: Comm,
        peer: usize,
        bytes: u64,
        stream: *mut c_void,
    ) -> Result<(), String> {
        // SAFETY: as in send.
        self.check("ncclRecv", unsafe {
            (self.recv)(c.0, peer as c_int, bytes as usize, stream)
        })
    }

    /// A collective of `kind` on a `bytes` buffer (the whole one).
    pub fn collective(
        &self,
        kind: CollKind,
        c: Comm,
        bytes: u64,
        stream: *mut c_void,
    ) -> Result<(), String> {
        let (name, f) = match kind {
            CollKind::AllReduce => ("ncclAllReduce", self.all_reduce),
            CollKind::AllGather => ("ncclAllGather", self.all_gather),
            CollKind::ReduceScatter => ("ncclReduceScatter", self.reduce_scatter),
        };
        // SAFETY: as in send.
        self.check(name, unsafe { f(c.0, bytes as usize, stream) })
    }
}
