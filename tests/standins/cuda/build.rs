fn main() {
    // The file cargo writes is libcuda.so; the dynamic linker must know it as libcuda.so.1.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
