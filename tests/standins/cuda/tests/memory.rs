//! Device memory in the stand-in driver: accounting across processes, and pitched, managed, pool
//! and virtual-memory allocations.
#[macro_use]
mod common;

use common::*;
use std::ffi::c_void;

/// The result of a driver call expected to fail.
macro_rules! rc {
    ($e:expr) => {{
        // SAFETY: driver calls with valid pointers; the arguments are wrong on purpose.
        unsafe { $e }
    }};
}

// ---------------------------------------------------------------- child scenarios

child_scenarios! {
    "memory" => scenario_memory,
    "mem_hold" => scenario_mem_hold,
    "memory_paths" => scenario_memory_paths,
}

fn scenario_memory() {
    let d = Drv::new();
    let (mut free, mut total) = (0usize, 0usize);
    ok!((d.api.mem_get_info)(&mut free, &mut total));
    let expect_free: usize = std::env::var("EXPECT_FREE_MIB")
        .unwrap()
        .parse::<usize>()
        .unwrap()
        << 20;
    assert_eq!(total, 1024 << 20);
    assert_eq!(free, expect_free);
    // 60% of what is free fits once, not twice.
    let size = ((expect_free >> 20) * 6 / 10) << 20;
    let mut a = 0u64;
    ok!((d.api.mem_alloc)(&mut a, size));
    let mut b = 0u64;
    // SAFETY: valid out-pointer.
    let r = unsafe { (d.api.mem_alloc)(&mut b, size) };
    assert_eq!(r, 2, "over-allocation must be CUDA_ERROR_OUT_OF_MEMORY");
    ok!((d.api.mem_get_info)(&mut free, &mut total));
    assert_eq!(free, expect_free - size);
    ok!((d.api.mem_free)(a));
    // SAFETY: a was just freed: freeing it again is an error, not a crash.
    assert_eq!(unsafe { (d.api.mem_free)(a) }, 1);
    ok!((d.api.mem_get_info)(&mut free, &mut total));
    assert_eq!(free, expect_free);
    let (mut x, mut y) = (0u64, 0u64);
    ok!((d.api.mem_alloc)(&mut x, 1));
    ok!((d.api.mem_alloc)(&mut y, 1));
    assert_ne!(x, y);
}

#[repr(C)]
struct Location {
    type_: i32,
    id: i32,
}

#[repr(C)]
struct AllocProp {
    type_: i32,
    handle_types: i32,
    location: Location,
    win32: P,
    flags: [u8; 8],
}

#[repr(C)]
struct PoolProps {
    alloc_type: i32,
    handle_types: i32,
    location: Location,
    win32: P,
    max_size: usize,
    usage: u16,
    reserved: [u8; 54],
}

#[repr(C)]
struct AccessDesc {
    location: Location,
    flags: i32,
}

/// Pitched, managed, pool and virtual-memory allocations, as the real driver behaves, counted on
/// the device (FREERIDE_SIM_MEM_MIB=1024).
fn scenario_memory_paths() {
    const MIB: usize = 1 << 20;
    let d = Drv::new();
    let cu = Cu::load();
    let used = || {
        let (mut free, mut total) = (0usize, 0usize);
        ok!((d.api.mem_get_info)(&mut free, &mut total));
        (total - free) / MIB
    };

    // Pitched: rows padded to 512 bytes, the widest access 4, 8 or 16 bytes.
    let pitch_alloc = f!(
        cu,
        "cuMemAllocPitch",
        fn(*mut u64, *mut usize, usize, usize, u32)
    );
    let (mut p, mut pitch) = (0u64, 0usize);
    assert_eq!(rc!(pitch_alloc(&mut p, &mut pitch, 1000, 1024, 3)), 1);
    ok!(pitch_alloc(&mut p, &mut pitch, 1000, 1024, 4));
    assert_eq!(pitch, 1024);
    assert_eq!(used(), 1);
    ok!((d.api.mem_free)(p));
    assert_eq!(used(), 0);

    // Managed: one of the two attach flags.
    let managed = f!(cu, "cuMemAllocManaged", fn(*mut u64, usize, u32));
    assert_eq!(rc!(managed(&mut p, 8 * MIB, 0)), 1);
    ok!(managed(&mut p, 8 * MIB, 1));
    assert_eq!(used(), 8);
    ok!((d.api.mem_free)(p));

    // Pools: the default pool is one handle; a free reaches the device when the stream does,
    // unless the release threshold keeps it in the pool (then a trim gives it back).
    let get_default = f!(cu, "cuDeviceGetDefaultMemPool", fn(*mut P, i32));
    let get_pool = f!(cu, "cuDeviceGetMemPool", fn(*mut P, i32));
    let pool_create = f!(cu, "cuMemPoolCreate", fn(*mut P, *const PoolProps));
    let pool_destroy = f!(cu, "cuMemPoolDestroy", fn(P));
    let set_attr = f!(cu, "cuMemPoolSetAttribute", fn(P, i32, *mut c_void));
    let get_attr = f!(cu, "cuMemPoolGetAttribute", fn(P, i32, *mut c_void));
    let trim = f!(cu, "cuMemPoolTrimTo", fn(P, usize));
    let alloc_async = f!(cu, "cuMemAllocAsync", fn(*mut u64, usize, P));
    let alloc_pool = f!(cu, "cuMemAllocFromPoolAsync", fn(*mut u64, usize, P, P));
    let free_async = f!(cu, "cuMemFreeAsync", fn(u64, P));
    let (mut def, mut def2, mut cur) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    ok!(get_default(&mut def, 0));
    ok!(get_default(&mut def2, 0));
    ok!(get_pool(&mut cur, 0));
    assert!(!def.is_null() && def == def2 && def == cur);
    assert_eq!(rc!(pool_destroy(def)), 1, "the default pool stays");
    let s = d.stream();
    ok!(alloc_async(&mut p, 64 * MIB, s));
    assert_eq!(used(), 64);
    ok!(free_async(p, s));
    ok!((d.api.stream_synchronize)(s));
    assert_eq!(used(), 0);
    let props = PoolProps {
        alloc_type: 1,
        handle_types: 0,
        location: Location { type_: 1, id: 0 },
        win32: std::ptr::null_mut(),
        max_size: 0,
        usage: 0,
        reserved: [0; 54],
    };
    let mut pool = std::ptr::null_mut();
    ok!(pool_create(&mut pool, &props));
    let mut keep: u64 = u64::MAX;
    ok!(set_attr(pool, 4, (&mut keep as *mut u64).cast()));
    ok!(alloc_pool(&mut p, 100 * MIB, pool, s));
    ok!(free_async(p, s));
    ok!((d.api.stream_synchronize)(s));
    let (mut reserved, mut in_use) = (0u64, 0u64);
    ok!(get_attr(pool, 5, (&mut reserved as *mut u64).cast()));
    ok!(get_attr(pool, 7, (&mut in_use as *mut u64).cast()));
    assert_eq!((reserved, in_use), (100 << 20, 0));
    assert_eq!(used(), 100, "the pool keeps what was freed into it");
    // Reused for a request of about its size.
    ok!(alloc_pool(&mut p, 80 * MIB, pool, s));
    assert_eq!(used(), 100);
    ok!((d.api.mem_free)(p));
    ok!(trim(pool, 0));
    assert_eq!(used(), 0);
    // What a pool keeps is given back before an allocation fails.
    ok!(alloc_pool(&mut p, 600 * MIB, pool, s));
    ok!(free_async(p, s));
    ok!((d.api.stream_synchronize)(s));
    assert_eq!(used(), 600);
    ok!(alloc_pool(&mut p, 900 * MIB, pool, s));
    assert_eq!(used(), 900);
    ok!(free_async(p, s));
    ok!((d.api.stream_synchronize)(s));
    ok!(pool_destroy(pool));
    assert_eq!(used(), 0);

    // Virtual memory: 2 MiB granularity, counted at creation, freed when neither a handle nor
    // a mapping refers to it any more.
    let gran = f!(
        cu,
        "cuMemGetAllocationGranularity",
        fn(*mut usize, *const AllocProp, i32)
    );
    let create = f!(
        cu,
        "cuMemCreate",
        fn(*mut u64, usize, *const AllocProp, u64)
    );
    let release = f!(cu, "cuMemRelease", fn(u64));
    let retain = f!(cu, "cuMemRetainAllocationHandle", fn(*mut u64, P));
    let reserve = f!(
        cu,
        "cuMemAddressReserve",
        fn(*mut u64, usize, usize, u64, u64)
    );
    let addr_free = f!(cu, "cuMemAddressFree", fn(u64, usize));
    let map = f!(cu, "cuMemMap", fn(u64, usize, usize, u64, u64));
    let unmap = f!(cu, "cuMemUnmap", fn(u64, usize));
    let set_access = f!(
        cu,
        "cuMemSetAccess",
        fn(u64, usize, *const AccessDesc, usize)
    );
    let prop = |type_| AllocProp {
        type_: 1,
        handle_types: 0,
        location: Location { type_, id: 0 },
        win32: std::ptr::null_mut(),
        flags: [0; 8],
    };
    let dev = prop(1);
    let mut g = 0usize;
    ok!(gran(&mut g, &dev, 0));
    assert_eq!(g, 2 * MIB);
    let mut h = 0u64;
    assert_eq!(
        rc!(create(&mut h, MIB, &dev, 0)),
        1,
        "not a multiple of the granularity"
    );
    assert_eq!(
        rc!(create(&mut h, 2048 * MIB, &dev, 0)),
        2,
        "more than the device has"
    );
    // No context is needed: a thread that never bound one creates and releases.
    let (c, r) = (create as usize, release as usize);
    let dev_addr = &dev as *const AllocProp as usize;
    std::thread::spawn(move || {
        type Create = unsafe extern "C" fn(*mut u64, usize, *const AllocProp, u64) -> i32;
        type Release = unsafe extern "C" fn(u64) -> i32;
        // SAFETY: the same two driver functions, transmuted back to their types.
        let (c, r) = unsafe {
            (
                std::mem::transmute::<usize, Create>(c),
                std::mem::transmute::<usize, Release>(r),
            )
        };
        let mut h = 0u64;
        ok!(c(&mut h, 2 * MIB, dev_addr as *const AllocProp, 0));
        ok!(r(h));
    })
    .join()
    .unwrap();
    let mut va = 0u64;
    ok!(reserve(&mut va, 64 * MIB, 0, 0, 0));
    assert_eq!(va % (2 * MIB) as u64, 0);
    let (mut h1, mut h2) = (0u64, 0u64);
    ok!(create(&mut h1, 20 * MIB, &dev, 0));
    ok!(create(&mut h2, 20 * MIB, &dev, 0));
    assert_eq!(used(), 40);
    ok!(map(va, 20 * MIB, 0, h1, 0));
    assert_eq!(
        rc!(map(va + 18 * MIB as u64, 20 * MIB, 0, h2, 0)),
        1,
        "overlap"
    );
    ok!(map(va + 20 * MIB as u64, 20 * MIB, 0, h2, 0));
    let access = AccessDesc {
        location: Location { type_: 1, id: 0 },
        flags: 3,
    };
    ok!(set_access(va, 40 * MIB, &access, 1));
    assert_eq!(
        rc!(set_access(va, 44 * MIB, &access, 1)),
        1,
        "not all mapped"
    );
    // Released while mapped: the memory lives until the mapping goes.
    ok!(release(h1));
    assert_eq!(used(), 40);
    // A retained handle is one more reference.
    let mut h1b = 0u64;
    ok!(retain(&mut h1b, (va + 4096) as P));
    assert_eq!(rc!(addr_free(va, 64 * MIB)), 1, "still mapped");
    assert_eq!(rc!(unmap(va, 10 * MIB)), 1, "part of a mapping");
    ok!(unmap(va, 40 * MIB));
    assert_eq!(used(), 40, "h1 retained, h2 not released");
    ok!(release(h1b));
    assert_eq!(used(), 20);
    ok!(release(h2));
    assert_eq!(used(), 0);
    assert_eq!(rc!(release(h2)), 1, "released twice");
    ok!(addr_free(va, 64 * MIB));
    // A host location makes host memory: nothing on the device.
    let host = prop(2);
    ok!(create(&mut h, 64 * MIB, &host, 0));
    assert_eq!(used(), 0);
    ok!(release(h));
    println!("memory paths ok");
}

// ---------------------------------------------------------------- tests

#[test]
fn memory_accounting_across_processes() {
    let sb = Sandbox::new("mem");
    let env = [("FREERIDE_SIM_MEM_MIB", "1024")];
    sb.run("memory", &[env[0], ("EXPECT_FREE_MIB", "1024")]);
    let mut holder = sb.spawn("mem_hold", &env);
    wait_line(&mut holder, "held");
    sb.run("memory", &[env[0], ("EXPECT_FREE_MIB", "224")]);
    // Fails: only 224 MiB left while the holder lives; after it dies its memory is reclaimed.
    holder.kill().unwrap();
    holder.wait().unwrap();
    sb.run("memory", &[env[0], ("EXPECT_FREE_MIB", "1024")]);
}

#[test]
fn pitched_managed_pool_and_virtual_memory_as_the_real_driver() {
    let sb = Sandbox::new("mempaths");
    sb.run("memory_paths", &[("FREERIDE_SIM_MEM_MIB", "1024")]);
}
