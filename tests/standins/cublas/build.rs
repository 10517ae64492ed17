fn main() {
    // The file cargo writes is libcublas.so; the dynamic linker must know it as libcublas.so.13.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcublas.so.13");
}
