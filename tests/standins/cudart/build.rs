fn main() {
    // The file cargo writes is libcudart.so; the dynamic linker must know it as libcudart.so.13.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.13");
}
