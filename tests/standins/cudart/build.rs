fn main() {
    // The file cargo writes is libcudart.so; the dynamic linker must know it as libcudart.so.13.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.13");
    // Like the real runtime, every exported symbol is versioned `libcudart.so.13`
    // (`__cudaLaunchKernel@@libcudart.so.13`). A named --version-script cannot do it: rustc passes
    // its own anonymous version script, which takes precedence (rust-lld) or conflicts (GNU ld).
    // GNU ld's --default-symver gives every exported symbol the soname as its version.
    println!("cargo:rustc-cdylib-link-arg=-fuse-ld=bfd");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--default-symver");
}
