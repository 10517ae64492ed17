//! Builds, with the C compiler the `cc` crate finds:
//! * link stubs (empty functions under the real names, like CUDA's own `stubs/libcuda.so`):
//!   `libcudart.so` (SONAME libcudart.so.13), `libcublas.so` (libcublas.so.13), `libnccl.so`
//!   (libnccl.so.2). `pipesim-stage` links against the first two, so it gets ordinary DT_NEEDED
//!   entries; at run time LD_LIBRARY_PATH gives it the test bed's stand-ins.
//! * `libpipecomm.so` from csrc/pipecomm.c, linked against the NCCL stub (DT_NEEDED libnccl.so.2).
use std::path::{Path, PathBuf};
use std::process::Command;

const CUDART: &[&str] = &[
    "cudaSetDevice",
    "cudaGetDeviceCount",
    "cudaStreamCreateWithFlags",
    "cudaEventCreateWithFlags",
    "cudaEventRecord",
    "cudaStreamWaitEvent",
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaGetErrorString",
    "cudaDeviceGetPCIBusId",
    "cudaFree",
    "__cudaRegisterFatBinary",
    "__cudaRegisterFatBinaryEnd",
    "__cudaRegisterFunction",
    "__cudaLaunchKernel",
    "cudaGraphCreate",
    "cudaGraphAddKernelNode",
    "cudaGraphInstantiate",
    "cudaGraphLaunch",
];
const CUBLAS: &[&str] = &[
    "cublasCreate_v2",
    "cublasDestroy_v2",
    "cublasSetStream_v2",
    "cublasSgemm_v2",
    "cublasGemmEx",
];
const NCCL: &[&str] = &[
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommDestroy",
    "ncclCommGetAsyncError",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclSend",
    "ncclRecv",
    "ncclAllReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclGetErrorString",
    "ncclCommCount",
];

fn run(mut cmd: Command) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed: {status}");
}

fn compiler() -> Command {
    cc::Build::new().get_compiler().to_command()
}

fn stub(dir: &Path, file: &str, soname: &str, names: &[&str]) {
    let src = dir.join(format!("{file}.c"));
    let body: String = names
        .iter()
        .map(|n| format!("void {n}(void) {{}}\n"))
        .collect();
    std::fs::write(&src, body).expect("write stub source");
    let mut cmd = compiler();
    cmd.args(["-shared", "-fPIC", "-o"])
        .arg(dir.join(format!("{file}.so")))
        .arg(&src)
        .arg(format!("-Wl,-soname,{soname}"));
    run(cmd);
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let stubs = out.join("stubs");
    std::fs::create_dir_all(&stubs).expect("mkdir stubs");
    stub(&stubs, "libcudart", "libcudart.so.13", CUDART);
    stub(&stubs, "libcublas", "libcublas.so.13", CUBLAS);
    stub(&stubs, "libnccl", "libnccl.so.2", NCCL);

    let mut cmd = compiler();
    cmd.args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(out.join("libpipecomm.so"))
        .arg("csrc/pipecomm.c")
        .arg("-Wl,-soname,libpipecomm.so")
        .arg("-Wl,--no-as-needed")
        .arg(format!("-L{}", stubs.display()))
        .arg("-lnccl");
    run(cmd);

    println!("cargo:rustc-link-search=native={}", stubs.display());
    println!("cargo:rerun-if-changed=csrc/pipecomm.c");
    println!("cargo:rerun-if-changed=build.rs");
}
