//! Our `dlsym` and real-symbol lookup.
//!
//! `dlsym` is caller-sensitive (`RTLD_NEXT`, and `RTLD_DEFAULT` from a library loaded in a local
//! scope). On x86-64 our `dlsym` is a naked entry that asks `dlsym_route` whether the name is
//! one we hook; if not it *tail-jumps* into the real `dlsym`, which therefore sees the original
//! caller: exact semantics, zero effect. Hooked names go to `dlsym_hooked` with the caller's
//! address, which emulates `RTLD_NEXT` from that caller and then hands out our wrapper.
//! The real `dlsym` comes from `dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34")` (then "GLIBC_2.2.5").
use crate::hooks::{self, Hook};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

pub const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
pub const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The real `dlsym` (resolved once; `None` only if libc has neither version, which cannot
/// happen on glibc).
pub fn real_dlsym() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p == 0 {
        for v in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with valid C strings; RTLD_NEXT relative to this library.
            let r = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
            if !r.is_null() {
                p = r as usize;
                break;
            }
        }
        if p == 0 {
            return None;
        }
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: p is the address of glibc's dlsym, whose signature DlsymFn matches.
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// `real_dlsym(handle, name)` as called from this library. `handle` is only ever a dlopen
/// handle, an `RTLD_*` pseudo-handle or a loaded object's link map (all valid for dlsym).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn sym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    match real_dlsym() {
        // SAFETY: name is a valid C string; handle is a dlopen handle or RTLD_*.
        Some(f) => unsafe { f(handle, name.as_ptr()) },
        None => std::ptr::null_mut(),
    }
}

/// Handle of an already-loaded library (`RTLD_NOLOAD`), or null. Caller must `dlclose` it.
pub fn noload(lib: &CStr) -> *mut c_void {
    // SAFETY: dlopen with NOLOAD never loads anything new.
    unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) }
}

/// Looks `name` up in already-loaded `lib`.
pub fn sym_in_loaded(lib: &CStr, name: &CStr) -> *mut c_void {
    let h = noload(lib);
    if h.is_null() {
        return std::ptr::null_mut();
    }
    let r = sym(h, name);
    // SAFETY: h came from a successful dlopen.
    unsafe { libc::dlclose(h) };
    r
}

/// Keeps the library that defines `addr` loaded for the life of the process: a real function
/// pointer cached in [`crate::hooks`] must never dangle, even when the program `dlclose`s that
/// library (frameworks unload and reload libnccl/libcudart). One `dlopen(RTLD_NOLOAD)` whose handle
/// is never closed, taken once per hooked function when its real pointer is first cached (slow
/// path; not on a launch). `addr` is only looked up by the loader, never dereferenced.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn pin_owner(addr: *const c_void) {
    if addr.is_null() {
        return;
    }
    // SAFETY: an all-zero Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only writes `info`; any address may be asked about.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dli_fname is the loader's NUL-terminated path of a loaded object; NOLOAD never loads
    // anything new, it only takes a reference (deliberately never released).
    let _ = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
}

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
/// Our `dlsym` (see the module docs).
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "mov rdi, rsi",
        "call {route}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        "mov rdx, [rsp]",
        "jmp {hooked}",
        route = sym dlsym_route,
        hooked = sym dlsym_hooked,
    )
}

#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
/// Our `dlsym` (portable fallback: the real dlsym sees this library as its caller).
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    if dlsym_route(name) != 0 {
        let f = real_dlsym().unwrap();
        return f(handle, name);
    }
    dlsym_hooked(handle, name, std::ptr::null())
}

/// Returns the real dlsym's address when `name` is not hooked (tail-jump), 0 when it is.
unsafe extern "C" fn dlsym_route(name: *const c_char) -> usize {
    let Some(f) = real_dlsym() else { return 0 };
    if name.is_null() {
        return f as usize;
    }
    // SAFETY: dlsym's contract: name is a NUL-terminated string.
    let n = unsafe { CStr::from_ptr(name) };
    if hooks::find(n).is_some() {
        0
    } else {
        f as usize
    }
}

#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
    l_ld: *mut c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

const RTLD_DL_LINKMAP: c_int = 2;

extern "C" {
    fn dladdr1(
        addr: *const c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut c_void,
        flags: c_int,
    ) -> c_int;
}

fn link_map_of(addr: *const c_void) -> *mut LinkMap {
    if addr.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: an all-zero Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut lm: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 only writes the two out-parameters.
    let ok = unsafe { dladdr1(addr, &mut info, &mut lm, RTLD_DL_LINKMAP) };
    if ok == 0 {
        std::ptr::null_mut()
    } else {
        lm as *mut LinkMap
    }
}

/// `dlsym(RTLD_NEXT, name)` as if called from `caller`: the first object after the caller's
/// in load order that itself defines `name`.
fn rtld_next_from(caller: *const c_void, name: &CStr) -> *mut c_void {
    let me = link_map_of(caller);
    if me.is_null() {
        return sym(RTLD_NEXT, name);
    }
    // SAFETY: link maps of loaded objects stay valid while we walk (loader lock is not held, but
    // we only read `l_next`/`l_name` of objects that are loaded; glibc never frees them while a
    // dlsym on them can be in progress in this thread).
    let mut m = unsafe { (*me).l_next };
    let mut hops = 0;
    while !m.is_null() && hops < 4096 {
        hops += 1;
        // SAFETY: m is a live link_map (see above).
        let (lname, next) = unsafe { ((*m).l_name, (*m).l_next) };
        if !lname.is_null() {
            // SAFETY: l_name is a NUL-terminated string owned by the loader.
            let lname = unsafe { CStr::from_ptr(lname) };
            if !lname.is_empty() {
                let h = noload(lname);
                if !h.is_null() {
                    let r = sym(h, name);
                    // SAFETY: h came from a successful dlopen.
                    unsafe { libc::dlclose(h) };
                    if !r.is_null() && link_map_of(r) == m {
                        return r;
                    }
                }
            }
        }
        m = next;
    }
    std::ptr::null_mut()
}

/// dlsym of a hooked name: find the real symbol with the caller's semantics, then hand out our
/// wrapper if it is the function we wrap.
unsafe extern "C" fn dlsym_hooked(
    handle: *mut c_void,
    name: *const c_char,
    caller: *const c_void,
) -> *mut c_void {
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: dlsym's contract: name is a NUL-terminated string.
    let n = unsafe { CStr::from_ptr(name) };
    let Some(h) = hooks::find(n) else {
        return sym(handle, n);
    };
    let r = if handle == RTLD_NEXT {
        rtld_next_from(caller, n)
    } else {
        let r = sym(handle, n);
        if r.is_null() && handle == RTLD_DEFAULT {
            // The caller may sit in a local scope (dlopen RTLD_LOCAL): search its own scope.
            let lm = link_map_of(caller);
            if lm.is_null() {
                r
            } else {
                sym(lm as *mut c_void, n)
            }
        } else {
            r
        }
    };
    offer(h, r)
}

/// Given the real pointer `r` a look-up found for hook `h`, returns what the caller should get:
/// our wrapper when `r` is (or can become) the function the wrapper forwards to, else `r`.
pub fn offer(h: &Hook, r: *mut c_void) -> *mut c_void {
    if r.is_null() {
        return r;
    }
    if std::ptr::eq(r as *const (), h.wrapper()) {
        // Found our own export (global scope): only if the real one exists.
        return if hooks::real(h) != 0 {
            r
        } else {
            std::ptr::null_mut()
        };
    }
    if hooks::is_wrapper(r) {
        return r;
    }
    if hooks::set_real(h, r as usize) {
        h.wrapper() as *mut c_void
    } else {
        r
    }
}
