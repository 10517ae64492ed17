//! How many simulated GPUs a job gets: the simulated GPU's device count, `FREERIDE_SIM_DEVICES`
//! (read by every process of the test bed; default 8, at most 64: see `simgpu/src/config.rs`).
//! A job of W processes needs W of them (one GPU per rank): `pipesim` and `freeride sim` give
//! their processes (and the side tasks beside them) enough when the variable is not set, and
//! refuse a job that needs more than it says.

/// The variable (`simgpu::abi::env::SIM_DEVICES`; pipesim does not link simgpu).
pub const SIM_DEVICES: &str = "FREERIDE_SIM_DEVICES";
/// The simulated GPU's default device count (`simgpu::config::DEFAULT_DEVICES`).
pub const DEFAULT_DEVICES: u32 = 8;
/// The most simulated GPUs a machine has (`simgpu::config::device_count` clamps to it).
pub const MAX_DEVICES: u32 = 64;

/// The device count for a job of `world` GPUs: `FREERIDE_SIM_DEVICES` if set, else enough for
/// the job (the default, or more). Err, naming both, when the variable is set to fewer devices
/// than the job needs or is not a number.
pub fn for_job(world: u32) -> Result<u32, String> {
    count_for(world, std::env::var(SIM_DEVICES).ok().as_deref())
}

/// [`for_job`] with the variable's value given.
fn count_for(world: u32, var: Option<&str>) -> Result<u32, String> {
    match var.filter(|v| !v.trim().is_empty()) {
        None => Ok(world.max(DEFAULT_DEVICES)),
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n.min(MAX_DEVICES) >= world => Ok(n),
            Ok(n) => Err(format!(
                "the job needs {world} simulated GPUs, but {SIM_DEVICES}={n} (unset it, or set it \
                 to at least {world}, at most {MAX_DEVICES})"
            )),
            Err(_) => Err(format!("{SIM_DEVICES}={v} is not a number of devices")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_gets_a_gpu_per_rank_unless_told_fewer() {
        assert_eq!(count_for(4, None), Ok(DEFAULT_DEVICES));
        assert_eq!(count_for(16, None), Ok(16));
        assert_eq!(count_for(16, Some(" ")), Ok(16));
        assert_eq!(count_for(12, Some("12")), Ok(12));
        let e = count_for(16, Some("12")).unwrap_err();
        assert!(
            e.contains("needs 16 simulated GPUs") && e.contains("FREERIDE_SIM_DEVICES=12"),
            "{e}"
        );
        assert!(count_for(65, Some("100")).is_err(), "at most 64");
        assert!(count_for(1, Some("many"))
            .unwrap_err()
            .contains("not a number"));
    }
}
