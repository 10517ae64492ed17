//! Finding a hook and its real function: by C name or API, the real function of an exported hook
//! resolved lazily (`RTLD_NEXT`, then the already-loaded owning library, trying the `pncclX`
//! alias), and a driver look-up's result mapped to our wrapper.
use super::*;

pub(super) static REALS: [AtomicUsize; 128] = [const { AtomicUsize::new(0) }; 128];

/// The hook of a C name (`dlsym`'s routing: keep cheap, no allocation).
pub fn find(name: &CStr) -> Option<&'static Hook> {
    let b = name.to_bytes();
    match b.first() {
        Some(b'c' | b'_' | b'n' | b'd') => {}
        _ => return None,
    }
    HOOKS.iter().find(|h| h.name().as_bytes() == b)
}

pub fn by_api(api: Api) -> Option<&'static Hook> {
    HOOKS.iter().find(|h| h.api == api)
}

pub fn is_wrapper(p: *mut c_void) -> bool {
    HOOKS
        .iter()
        .any(|h| std::ptr::eq(h.wrapper, p as *const ()))
}

/// Records `r` as the real function of `h` (first one wins). True if `h`'s real function is `r`.
pub fn set_real(h: &Hook, r: usize) -> bool {
    let slot = &REALS[h.api as usize];
    match slot.compare_exchange(0, r, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            dl::pin_owner(r as *const c_void);
            true
        }
        Err(cur) => cur == r,
    }
}

/// The real function of `h` (0 if unknown); resolves exported hooks lazily.
pub fn real(h: &Hook) -> usize {
    if h.class == Class::Libc {
        return dl::real_dlsym().map(|f| f as usize).unwrap_or(0);
    }
    let v = REALS[h.api as usize].load(Ordering::Acquire);
    if v != 0 || !h.exported {
        return v;
    }
    resolve_exported(h)
}

#[cold]
#[inline(never)]
fn resolve_exported(h: &Hook) -> usize {
    let mut name = [0u8; 64];
    let n = h.name().as_bytes();
    if n.len() >= name.len() {
        return 0;
    }
    name[..n.len()].copy_from_slice(n);
    let Ok(cname) = CStr::from_bytes_until_nul(&name) else {
        return 0;
    };
    let own = h.wrapper as usize;
    let ok = |p: *mut c_void| !p.is_null() && p as usize != own;
    let libs: &[&CStr] = match h.class {
        Class::Runtime => &[c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"],
        Class::Nccl => &[c"libnccl.so.2", c"libnccl.so"],
        _ => &[],
    };
    let mut found = dl::sym(dl::RTLD_NEXT, cname);
    if !ok(found) {
        if let Some(a) = h.alias {
            found = dl::sym(dl::RTLD_NEXT, a);
        }
    }
    if !ok(found) {
        'outer: for lib in libs {
            for nm in h.alias.into_iter().chain(std::iter::once(cname)) {
                found = dl::sym_in_loaded(lib, nm);
                if ok(found) {
                    break 'outer;
                }
            }
        }
    }
    if !ok(found) {
        return 0;
    }
    set_real(h, found as usize);
    REALS[h.api as usize].load(Ordering::Acquire)
}

/// Typed real function of `api`.
#[inline(always)]
pub(super) fn real_fn<F: Copy>(api: Api) -> Option<F> {
    let mut v = REALS[api as usize].load(Ordering::Relaxed);
    if v == 0 {
        v = by_api(api).map(real).unwrap_or(0);
        if v == 0 {
            return None;
        }
    }
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    // SAFETY: F is the fn-pointer type of `api`'s C signature; v is that function's address.
    Some(unsafe { std::mem::transmute_copy::<usize, F>(&v) })
}

/// Maps a pointer returned by a `cuGetProcAddress`-style look-up to our wrapper when it is one
/// of the functions we hook under this (symbol, version, flags).
pub(super) fn map_proc(symbol: *const c_char, pfn: *mut *mut c_void, ver: i64, flags: u64) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: pfn was just written by the real look-up, which returned success.
    let p = unsafe { *pfn };
    if p.is_null() {
        return;
    }
    // SAFETY: the look-up's contract: symbol is a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let ptsz = flags & 2 != 0;
    for h in HOOKS {
        let Some(k) = h.proc_key else { continue };
        if k.symbol.as_bytes() == s
            && ver >= k.min_ver
            && ver < k.max_ver
            && k.ptsz.is_none_or(|x| x == ptsz)
        {
            // SAFETY: pfn is a valid out-pointer (see above).
            unsafe { *pfn = dl::offer(h, p) };
            return;
        }
    }
}
