//! `contend`: how the simulated GPU shares a device, measured as the H200 was
//! (`shared/reference/launch-paths.md`, "Sharing the GPU with a side task").
//!
//! ```text
//! contend bench [--probes N] [--iterations N]   both experiments, simulated beside H200 figures
//! contend side  [--kernel-us US]                 a side task that is not held back
//! contend probe [--kernel-us US] [--count N] [--gap-us US]
//! contend busy  [--kernels N] [--kernel-us US] [--gap-us US] [--iterations N]
//! ```
//! The roles run on device 0 of the stand-in driver (`libcuda.so.1` from `LD_LIBRARY_PATH`);
//! `bench` starts them itself. Errors: one line on stderr, exit status 1 (2 for bad usage).
mod bench;
mod cu;
mod roles;

use roles::Flags;

fn main() {
    let mut args = std::env::args().skip(1);
    let role = args.next().unwrap_or_default();
    let flags = Flags::new(args.collect());
    let r = match role.as_str() {
        "bench" => flags
            .get("probes", 400usize)
            .and_then(|p| Ok((p, flags.get("iterations", 30usize)?)))
            .and_then(|(p, i)| bench::run(p, i)),
        "side" => roles::side(&flags),
        "probe" => roles::probe(&flags),
        "busy" => roles::busy(&flags),
        _ => {
            eprintln!("usage: contend bench|side|probe|busy [--flag value ...]");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("contend {role}: {e}");
        std::process::exit(1);
    }
}
