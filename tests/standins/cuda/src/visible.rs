//! The devices this process sees: `CUDA_VISIBLE_DEVICES` over the simulated machine's devices
//! (`simgpu::identity::visible_devices` has the rules), read once, when first needed, as the real
//! driver reads it at `cuInit`. Device ordinals of the API index this list; the simulated GPU and
//! the ground truth use the physical index.
use std::sync::OnceLock;

fn list() -> &'static [i32] {
    static LIST: OnceLock<Vec<i32>> = OnceLock::new();
    LIST.get_or_init(|| {
        let var = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        simgpu::identity::visible_devices(var.as_deref(), simgpu::config::device_count())
    })
}

/// Number of visible devices.
pub fn count() -> i32 {
    list().len() as i32
}

/// The physical device behind ordinal `dev`, if it is visible.
pub fn physical(dev: i32) -> Option<i32> {
    usize::try_from(dev)
        .ok()
        .and_then(|i| list().get(i).copied())
}

/// The ordinal under which physical device `phys` is visible.
pub fn ordinal_of(phys: i32) -> Option<i32> {
    list().iter().position(|&d| d == phys).map(|i| i as i32)
}
