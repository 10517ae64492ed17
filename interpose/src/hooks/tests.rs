use super::*;
use std::collections::HashSet;

#[test]
fn table_is_consistent() {
    let mut names = HashSet::new();
    let mut wrappers = HashSet::new();
    for h in HOOKS {
        assert!(names.insert(h.name()), "duplicate {}", h.name());
        assert!(
            wrappers.insert(h.wrapper as usize),
            "shared wrapper {}",
            h.name()
        );
        assert!(!h.wrapper.is_null());
        let n = std::ffi::CString::new(h.name()).unwrap();
        assert!(std::ptr::eq(find(&n).unwrap(), h));
        assert_eq!(h.exported, h.class != Class::Driver, "{}", h.name());
        assert_eq!(
            h.proc_key.is_some(),
            h.class == Class::Driver,
            "{}",
            h.name()
        );
        assert_eq!(h.alias.is_some(), h.class == Class::Nccl, "{}", h.name());
        if let Some(k) = h.proc_key {
            // The ABI name is the base name, its _ptsz flavour or a _vN version of it.
            assert!(h.name().starts_with(k.symbol), "{}", h.name());
            assert!(k.max_ver <= MAX_KNOWN_CUDA);
        }
    }
    // Every API id (but the placeholder) is hooked exactly once.
    for a in Api::ALL {
        if *a != Api::None {
            assert!(by_api(*a).is_some(), "{a:?} not in HOOKS");
        }
    }
    assert!(find(c"malloc").is_none());
    assert!(find(c"cuInit").is_none());
}

/// Every driver hook's look-up key names an entry point of the driver with the hook's C name
/// and ABI: asked of the stand-in driver (the real one's names, versions and variants) at the
/// first and the last version the key covers, `cuGetProcAddress_v2` hands out exactly the
/// function exported under the hook's name.
#[test]
fn driver_hooks_name_entry_points_of_the_driver() {
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().parent().unwrap().join("libcuda.so");
    if !so.exists() {
        eprintln!("skip: {} not built", so.display());
        return;
    }
    let path = std::ffi::CString::new(so.to_str().unwrap()).unwrap();
    // SAFETY: dlopen of the stand-in driver, kept for the test process.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null());
    let sym = |n: &str| {
        let c = std::ffi::CString::new(n).unwrap();
        // SAFETY: live handle, valid C string.
        unsafe { libc::dlsym(h, c.as_ptr()) as usize }
    };
    type GetProc = unsafe extern "C" fn(*const c_char, PP, c_int, u64, *mut c_int) -> c_int;
    // SAFETY: cuGetProcAddress_v2 has this signature (cuda.h).
    let get: GetProc = unsafe { std::mem::transmute(sym("cuGetProcAddress_v2")) };
    let mut bad = vec![];
    for hk in HOOKS.iter().filter(|h| h.class == Class::Driver) {
        let k = hk.proc_key.unwrap();
        let want = sym(hk.name());
        assert_ne!(want, 0, "the driver exports no {}", hk.name());
        let flags = if k.ptsz == Some(true) { 2 } else { 0 };
        let c = std::ffi::CString::new(k.symbol).unwrap();
        for ver in [k.min_ver, k.max_ver - 1] {
            let mut p: *mut c_void = std::ptr::null_mut();
            let mut st = -1;
            // SAFETY: valid C string and out-pointers.
            let r = unsafe { get(c.as_ptr(), &mut p, ver as c_int, flags, &mut st) };
            if r != 0 || p as usize != want {
                bad.push(format!("{} at {ver}", hk.name()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the driver hands out other functions: {bad:?}"
    );
}

#[test]
fn exported_symbols_match_table() {
    // target/release/deps/<test> -> target/release/libfreeride.so
    let exe = std::env::current_exe().unwrap();
    let so = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libfreeride.so");
    if !so.exists() {
        eprintln!("skip: {} not built", so.display());
        return;
    }
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let exported: HashSet<&str> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (_addr, ty, name) = (it.next()?, it.next()?, it.next()?);
            (ty == "T").then_some(name)
        })
        .collect();
    let want: HashSet<&str> = HOOKS
        .iter()
        .filter(|h| h.exported)
        .map(|h| h.name())
        .collect();
    assert_eq!(
        exported, want,
        "exported functions of libfreeride.so != exported hooks"
    );
}
