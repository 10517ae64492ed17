fn main() {
    // The file cargo writes is libnccl.so; the dynamic linker must know it as libnccl.so.2.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
}
