//! Device memory accounting: pure helpers and the fake address space.
//!
//! No memory exists; an allocation only counts against the device's total (across processes, in
//! the shared slots) and gets a unique fake address. Device N's addresses lie in
//! `[(N+1) << ADDR_SHIFT, (N+2) << ADDR_SHIFT)`, so an address tells its device.

/// log2 of the address range of one device (16 TiB).
pub const ADDR_SHIFT: u32 = 44;
/// Allocation granularity of the fake addresses.
pub const ALIGN: u64 = 512;

/// First address of device `id`.
pub fn addr_base(id: i32) -> u64 {
    (id as u64 + 1) << ADDR_SHIFT
}

/// The device an address belongs to, if it looks like one of ours.
pub fn device_of(addr: u64) -> Option<i32> {
    let n = addr >> ADDR_SHIFT;
    (1..=64).contains(&n).then(|| (n - 1) as i32)
}

/// Address space an allocation of `size` bytes takes.
pub fn footprint(size: u64) -> u64 {
    size.div_ceil(ALIGN).max(1) * ALIGN
}

/// Whether `size` more bytes fit when `used` of `total` are taken.
pub fn fits(used: u64, total: u64, size: u64) -> bool {
    used.checked_add(size).is_some_and(|u| u <= total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_their_device() {
        assert_eq!(device_of(addr_base(0)), Some(0));
        assert_eq!(device_of(addr_base(7) + 12345), Some(7));
        assert_eq!(device_of(0x1000), None);
    }

    #[test]
    fn accounting() {
        assert!(fits(0, 100, 100));
        assert!(!fits(1, 100, 100));
        assert!(!fits(u64::MAX, 100, 1));
        assert_eq!(footprint(1), 512);
        assert_eq!(footprint(0), 512);
        assert_eq!(footprint(1024), 1024);
    }
}
