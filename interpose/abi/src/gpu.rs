//! The physical GPU a record, a grant or a side task names: [`GpuId`], the GPU's PCI bus id packed
//! into 32 bits, the same in every process whatever `CUDA_VISIBLE_DEVICES` made of its ordinals.
//!
//! Packing: `domain << 16 | bus << 8 | device << 3 | function` (domain 16 bits, bus 8, device 5,
//! function 3), the fields of the bus id `dddd:bb:dd.f` that `cuDeviceGetPCIBusId` writes.
//! [`GpuId::UNKNOWN`] (all ones; as the records' `i32` field, -1) is "not known": the bus id
//! `ffff:ff:1f.7` that would pack to it is not a GPU's. A domain above 16 bits (the 8-digit domains
//! some hypervisors hand out, `00000001:00:00.0`) is folded into 16 (`domain ^ domain >> 16`): two
//! GPUs of one node would have to differ in those upper bits only to collide. Every part of
//! freeride converts with this module: the records' `device` field ([`GpuId::from_field`],
//! [`GpuId::field`]), the grant block's name ([`crate::session::grant_file_name`]), what is shown
//! (its [`std::fmt::Display`] is the bus id, `0000:11:00.0`).
use std::fmt;

/// A physical GPU by its packed PCI bus id (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct GpuId(pub u32);

impl GpuId {
    /// Not known (no driver, no context, the driver could not say).
    pub const UNKNOWN: GpuId = GpuId(u32::MAX);

    /// The GPU at PCI `domain:bus:device.function` (device and function are masked to their 5
    /// and 3 bits; a domain above 16 bits is folded, see the module docs).
    pub const fn new(domain: u32, bus: u32, device: u32, function: u32) -> GpuId {
        let d = (domain ^ (domain >> 16)) & 0xffff;
        GpuId(d << 16 | (bus & 0xff) << 8 | (device & 0x1f) << 3 | (function & 0x7))
    }

    /// The value of a record's `device` field (`-1`: unknown).
    pub const fn from_field(v: i32) -> GpuId {
        GpuId(v as u32)
    }

    /// This id as a record's `device` field.
    pub const fn field(self) -> i32 {
        self.0 as i32
    }

    /// The name a process without a CUDA driver gives its device ordinal `ordinal` (a side task
    /// that runs no GPU work, the SDK's tests): domain `fffe`, never a real GPU's. Whatever has a
    /// driver names a GPU by its bus id instead.
    pub const fn unnamed(ordinal: u32) -> GpuId {
        GpuId::new(0xfffe, ordinal, 0, 0)
    }

    pub const fn is_known(self) -> bool {
        self.0 != u32::MAX
    }

    pub const fn domain(self) -> u32 {
        self.0 >> 16
    }
    pub const fn bus(self) -> u32 {
        (self.0 >> 8) & 0xff
    }
    pub const fn device(self) -> u32 {
        (self.0 >> 3) & 0x1f
    }
    pub const fn function(self) -> u32 {
        self.0 & 0x7
    }

    /// Parses a bus id as the driver writes it (`0000:11:00.0`; the domain in 4 or 8 hex digits;
    /// either case; a trailing NUL, newline or spaces are ignored). No allocation: the interposer
    /// parses the driver's answer on its slow path with it.
    pub fn parse(s: &str) -> Option<GpuId> {
        Self::parse_bytes(s.as_bytes())
    }

    /// [`GpuId::parse`] of a C buffer (stops at the first NUL).
    pub fn parse_bytes(b: &[u8]) -> Option<GpuId> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let mut b = &b[..end];
        while let [rest @ .., last] = b {
            if last.is_ascii_whitespace() {
                b = rest;
            } else {
                break;
            }
        }
        let colon1 = b.iter().position(|&c| c == b':')?;
        let (dom, rest) = b.split_at(colon1);
        let rest = &rest[1..];
        if rest.len() != 7 || rest[2] != b':' || rest[5] != b'.' {
            return None;
        }
        if dom.is_empty() || dom.len() > 8 {
            return None;
        }
        let domain = hex(dom)?;
        let bus = hex(&rest[0..2])?;
        let dev = hex(&rest[3..5])?;
        let func = hex(&rest[6..7])?;
        if dev > 0x1f || func > 7 {
            return None;
        }
        Some(GpuId::new(domain, bus, dev, func))
    }
}

fn hex(b: &[u8]) -> Option<u32> {
    let mut v: u32 = 0;
    for &c in b {
        let d = (c as char).to_digit(16)?;
        v = v.checked_mul(16)?.checked_add(d)?;
    }
    Some(v)
}

impl From<GpuId> for u32 {
    fn from(g: GpuId) -> u32 {
        g.0
    }
}

/// The bus id (`0000:11:00.0`), or `unknown`.
impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_known() {
            return f.write_str("unknown");
        }
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain(),
            self.bus(),
            self.device(),
            self.function()
        )
    }
}

impl fmt::Debug for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GpuId({self})")
    }
}

/// A GPU's UUID as the driver gives it (`cuDeviceGetUuid`) in its usual text form,
/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (all zeros: unknown).
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h = |r: std::ops::Range<usize>| u[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h(0..4),
        h(4..6),
        h(6..8),
        h(8..10),
        h(10..16)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_pack_parse_and_print_round_trip() {
        let g = GpuId::parse("0000:11:00.0").unwrap();
        assert_eq!(g, GpuId::new(0, 0x11, 0, 0));
        assert_eq!(g.0, 0x1100);
        assert_eq!(g.to_string(), "0000:11:00.0");
        let h = GpuId::parse("0001:AF:1f.7\0garbage").unwrap();
        assert_eq!(
            (h.domain(), h.bus(), h.device(), h.function()),
            (1, 0xaf, 0x1f, 7)
        );
        assert_eq!(h.to_string(), "0001:af:1f.7");
        assert_eq!(GpuId::parse(&h.to_string()), Some(h));
        // nvidia-smi's 8-digit domain, and a trailing newline.
        assert_eq!(GpuId::parse("00000000:11:00.0\n"), Some(g));
        // The record field: -1 is unknown, every other value a GPU.
        assert_eq!(GpuId::from_field(-1), GpuId::UNKNOWN);
        assert!(!GpuId::from_field(-1).is_known());
        assert_eq!(GpuId::from_field(g.field()), g);
        assert_eq!(GpuId::UNKNOWN.to_string(), "unknown");
        // A domain past 16 bits is folded, not lost.
        assert_ne!(GpuId::new(0x10000, 0x11, 0, 0), g);
        for bad in [
            "",
            "0000:11:00",
            "0000:11:00.8",
            "0000:11:20.0",
            "zz:11:00.0",
            "0000-11-00.0",
            "000000000:11:00.0",
            "0000:11:00.00",
        ] {
            assert_eq!(GpuId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_uuid_reads_as_the_driver_prints_it() {
        let mut u = [0u8; 16];
        u[0] = 0xab;
        u[15] = 0x01;
        assert_eq!(uuid_text(&u), "GPU-ab000000-0000-0000-0000-000000000001");
    }
}
