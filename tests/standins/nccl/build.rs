//! Links libnccl.so as libnccl.so.2 and exports every `ncclX` as a weak alias of `pncclX`.
use std::io::Write;

/// The API; each name is exported twice: strong `pncclX` (Rust) and weak `ncclX` (asm alias).
/// Keep in sync with `API` in src/lib.rs.
const API: &[&str] = &[
    "GetVersion",
    "GetUniqueId",
    "CommInitRank",
    "CommInitRankConfig",
    "CommInitAll",
    "CommSplit",
    "CommDestroy",
    "CommAbort",
    "CommCount",
    "CommUserRank",
    "CommCuDevice",
    "CommGetAsyncError",
    "GetErrorString",
    "GetLastError",
    "Send",
    "Recv",
    "GroupStart",
    "GroupEnd",
    "AllReduce",
    "ReduceScatter",
    "AllGather",
    "Broadcast",
];

fn main() {
    // The file cargo writes is libnccl.so; the dynamic linker must know it as libnccl.so.2.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
    // rustc's own version script keeps only the Rust `pnccl*` symbols global; this second script
    // (GNU ld merges anonymous version scripts) makes the asm-defined weak `nccl*` aliases global too.
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    let map = format!("{out}/weak-aliases.map");
    let mut f = std::fs::File::create(&map).expect("create version script");
    let names: Vec<String> = API.iter().map(|n| format!("nccl{n};")).collect();
    writeln!(f, "{{ global: {} }};", names.join(" ")).expect("write version script");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map}");
    println!("cargo:rerun-if-changed=build.rs");
}
