fn main() {
    // Never unmap libfreeride.so (its poller/trace threads run its code): dlclose is a no-op.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    // Bind our own references to our own definitions (we export dlsym and friends).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
}
