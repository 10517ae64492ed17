//! The identity of simulated device N (its physical index): the PCI bus id and UUID the stand-in
//! driver reports for it in every process, the bus id the ground truth names it by, and which
//! devices a process sees under `CUDA_VISIBLE_DEVICES`.
//!
//! * PCI bus id: `0000:%02x:00.0` with bus `0x10 + N`.
//! * UUID: 16 bytes derived from N (they look random, as real ones do, and are the same in every
//!   process); as text `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (lower-case hex).
//! * `CUDA_VISIBLE_DEVICES`, as the real driver reads it: unset, every device in physical order;
//!   otherwise a comma list, each entry a physical ordinal or a UUID (`GPU-...`, or a unique prefix
//!   of one, `GPU-` included), the process's ordinals in list order. The first invalid entry (not a
//!   number, a number beyond the devices, an unknown or ambiguous UUID, a device listed twice) ends
//!   the list: it and everything after it are invisible. Set but empty: no device.

/// The first PCI bus number (device 0's).
pub const FIRST_BUS: i32 = 0x10;

/// PCI bus number of device `dev`.
pub fn pci_bus(dev: i32) -> i32 {
    FIRST_BUS + dev
}

/// PCI bus id of device `dev` (`domain:bus:device.function`).
pub fn pci_bus_id(dev: i32) -> String {
    format!("0000:{:02x}:00.0", pci_bus(dev))
}

/// The device whose PCI bus id is `id` (case-insensitive; the domain may be omitted, as
/// `cuDeviceGetByPCIBusId` allows), if it is one of `count`.
pub fn device_of_bus_id(id: &str, count: i32) -> Option<i32> {
    let id = id.trim().to_ascii_lowercase();
    (0..count).find(|&d| {
        let full = pci_bus_id(d);
        id == full || full.strip_prefix("0000:") == Some(id.as_str())
    })
}

/// splitmix64: a fixed, well-mixed function of its input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 16 UUID bytes of device `dev` (RFC 4122 version 4 layout, as NVIDIA's are).
pub fn uuid_bytes(dev: i32) -> [u8; 16] {
    let a = mix(0x6672_6565_7269_6465 ^ dev as u64);
    let b = mix(a ^ 0x7369_6d67_7075);
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&a.to_be_bytes());
    u[8..].copy_from_slice(&b.to_be_bytes());
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// The UUID of device `dev` as `nvidia-smi -L` prints it.
pub fn uuid_string(dev: i32) -> String {
    let u = uuid_bytes(dev);
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..].concat()
    )
}

/// The physical devices a process sees, in ordinal order, given `CUDA_VISIBLE_DEVICES` (`None`:
/// unset) and `count` physical devices.
pub fn visible_devices(var: Option<&str>, count: i32) -> Vec<i32> {
    let Some(list) = var else {
        return (0..count).collect();
    };
    let mut out: Vec<i32> = Vec::new();
    if list.trim().is_empty() {
        return out;
    }
    for entry in list.split(',') {
        match entry_device(entry.trim(), count) {
            Some(d) if !out.contains(&d) => out.push(d),
            _ => break,
        }
    }
    out
}

/// The physical device one `CUDA_VISIBLE_DEVICES` entry names.
fn entry_device(entry: &str, count: i32) -> Option<i32> {
    if entry.len() > 4 && entry[..4].eq_ignore_ascii_case("GPU-") {
        let want = entry.to_ascii_lowercase();
        let mut hits =
            (0..count).filter(|&d| uuid_string(d).to_ascii_lowercase().starts_with(&want));
        let first = hits.next()?;
        return hits.next().is_none().then_some(first);
    }
    let n: i32 = entry.parse().ok()?;
    (0..count).contains(&n).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_and_uuids_are_distinct_and_stable() {
        assert_eq!(pci_bus_id(0), "0000:10:00.0");
        assert_eq!(pci_bus_id(63), "0000:4f:00.0");
        let u: Vec<String> = (0..64).map(uuid_string).collect();
        let mut d = u.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 64);
        assert_eq!(u[3], uuid_string(3));
        assert_eq!(u[3].len(), 40);
        assert!(u[3].starts_with("GPU-"));
        assert_eq!(device_of_bus_id("0000:12:00.0", 8), Some(2));
        assert_eq!(device_of_bus_id("12:00.0", 8), Some(2));
        assert_eq!(device_of_bus_id("0000:1A:00.0", 16), Some(10));
        assert_eq!(device_of_bus_id("0000:1a:00.0", 8), None);
    }

    #[test]
    fn visible_devices_follow_the_driver() {
        assert_eq!(visible_devices(None, 4), vec![0, 1, 2, 3]);
        assert_eq!(visible_devices(Some(""), 4), Vec::<i32>::new());
        assert_eq!(visible_devices(Some("2"), 4), vec![2]);
        assert_eq!(visible_devices(Some("3, 1"), 4), vec![3, 1]);
        // An invalid entry ends the list.
        assert_eq!(visible_devices(Some("1,7,2"), 4), vec![1]);
        assert_eq!(visible_devices(Some("1,x,2"), 4), vec![1]);
        assert_eq!(visible_devices(Some("1,1,2"), 4), vec![1]);
        assert_eq!(visible_devices(Some("-1"), 4), Vec::<i32>::new());
        // UUIDs, whole or a unique prefix.
        let u2 = uuid_string(2);
        assert_eq!(visible_devices(Some(&format!("{u2},0")), 4), vec![2, 0]);
        assert_eq!(visible_devices(Some(&u2[..12].to_uppercase()), 4), vec![2]);
        assert_eq!(visible_devices(Some("GPU-"), 4), Vec::<i32>::new());
        assert_eq!(visible_devices(Some("GPU-zz"), 4), Vec::<i32>::new());
    }
}
