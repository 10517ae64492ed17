//! The device memory one process holds, per GPU, from its memory records as the interposer
//! hooked them on every allocation path: device pointers (plain, pitched, managed,
//! stream-ordered, pools) from allocation to free, and physical allocations of the virtual memory
//! API (`cuMemCreate`: PyTorch's `expandable_segments`, NCCL's buffers) while a handle or a mapping
//! refers to them, as `freeride_abi::event::MemEffect` defines. Bounded: past
//! [`MAX_TRACKED`] live entries of one kind, that kind is forgotten (its bytes with it).
use freeride_abi::event::MemEffect;
use std::collections::{BTreeMap, HashMap};

/// Live entries kept per kind (allocations, physical allocations, mappings).
pub const MAX_TRACKED: usize = 1 << 16;

#[derive(Clone, Copy, Debug)]
struct Physical {
    bytes: u64,
    device: i32,
    refs: u32,
}

#[derive(Default, Debug)]
pub struct MemView {
    /// Device pointer -> (bytes, device).
    allocs: HashMap<u64, (u64, i32)>,
    /// Physical allocation handle -> what it holds and its references.
    physical: HashMap<u64, Physical>,
    /// Virtual address -> (bytes, handle).
    maps: BTreeMap<u64, (u64, u64)>,
    held: BTreeMap<i32, u64>,
}

impl MemView {
    fn add(&mut self, device: i32, bytes: u64) {
        *self.held.entry(device).or_default() += bytes;
    }

    fn sub(&mut self, device: i32, bytes: u64) {
        if let Some(h) = self.held.get_mut(&device) {
            *h = h.saturating_sub(bytes);
            if *h == 0 {
                self.held.remove(&device);
            }
        }
    }

    fn unref(&mut self, handle: u64) {
        let Some(p) = self.physical.get_mut(&handle) else {
            return;
        };
        p.refs = p.refs.saturating_sub(1);
        if p.refs == 0 {
            let p = *p;
            self.physical.remove(&handle);
            self.sub(p.device, p.bytes);
        }
    }

    /// Applies one successful memory event of this process. `device`: the GPU the record names
    /// (-1: none; a device pointer is then counted on `fallback`, the process's GPU; a physical
    /// allocation with no device is host memory, not counted).
    pub fn apply(&mut self, device: i32, fallback: i32, e: MemEffect) {
        match e {
            MemEffect::Alloc { ptr, bytes } => {
                let d = if device >= 0 { device } else { fallback };
                if d < 0 {
                    return;
                }
                if self.allocs.len() >= MAX_TRACKED {
                    for (_, (b, d)) in std::mem::take(&mut self.allocs) {
                        self.sub(d, b);
                    }
                }
                if let Some((b, od)) = self.allocs.insert(ptr, (bytes, d)) {
                    self.sub(od, b);
                }
                self.add(d, bytes);
            }
            MemEffect::Free { ptr } => {
                if let Some((b, d)) = self.allocs.remove(&ptr) {
                    self.sub(d, b);
                }
            }
            MemEffect::Create { handle, bytes } => {
                if device < 0 {
                    return;
                }
                if self.physical.len() >= MAX_TRACKED {
                    for (_, p) in std::mem::take(&mut self.physical) {
                        self.sub(p.device, p.bytes);
                    }
                    self.maps.clear();
                }
                if let Some(old) = self.physical.insert(
                    handle,
                    Physical {
                        bytes,
                        device,
                        refs: 1,
                    },
                ) {
                    self.sub(old.device, old.bytes);
                }
                self.add(device, bytes);
            }
            MemEffect::Retain { handle } => {
                if let Some(p) = self.physical.get_mut(&handle) {
                    p.refs += 1;
                }
            }
            MemEffect::Release { handle } => self.unref(handle),
            MemEffect::Map { va, bytes, handle } => {
                if self.maps.len() < MAX_TRACKED {
                    if let Some(p) = self.physical.get_mut(&handle) {
                        p.refs += 1;
                        if let Some((_, old)) = self.maps.insert(va, (bytes, handle)) {
                            self.unref(old);
                        }
                    }
                }
            }
            MemEffect::Unmap { va, bytes } => {
                let gone: Vec<u64> = self
                    .maps
                    .range(va..va.saturating_add(bytes))
                    .map(|(k, _)| *k)
                    .collect();
                for k in gone {
                    if let Some((_, h)) = self.maps.remove(&k) {
                        self.unref(h);
                    }
                }
            }
        }
    }

    /// Bytes held on GPU `device`.
    pub fn held_on(&self, device: i32) -> u64 {
        self.held.get(&device).copied().unwrap_or(0)
    }

    /// Bytes held on all GPUs.
    pub fn total(&self) -> u64 {
        self.held.values().sum()
    }

    /// (GPU, bytes held there), in GPU order.
    pub fn by_device(&self) -> Vec<(i32, u64)> {
        self.held.iter().map(|(d, b)| (*d, *b)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn every_path_is_held_on_its_gpu_until_it_is_freed() {
        let mut m = MemView::default();
        // Plain and pool allocations; one with no device recorded counts on the process's GPU.
        m.apply(0, 0, MemEffect::Alloc { ptr: 1, bytes: MIB });
        m.apply(
            1,
            0,
            MemEffect::Alloc {
                ptr: 2,
                bytes: 2 * MIB,
            },
        );
        m.apply(
            -1,
            0,
            MemEffect::Alloc {
                ptr: 3,
                bytes: 4 * MIB,
            },
        );
        assert_eq!(m.by_device(), [(0, 5 * MIB), (1, 2 * MIB)]);
        m.apply(-1, 0, MemEffect::Free { ptr: 2 });
        m.apply(-1, 0, MemEffect::Free { ptr: 99 });
        assert_eq!(m.held_on(1), 0);
        assert_eq!(m.total(), 5 * MIB);
    }

    #[test]
    fn expandable_segments_are_held_while_a_handle_or_a_mapping_refers_to_them() {
        let mut m = MemView::default();
        let seg = 20 * MIB;
        // PyTorch's pattern: reserve, then create + map chunks as the segment grows.
        for i in 0..4u64 {
            m.apply(
                2,
                0,
                MemEffect::Create {
                    handle: 100 + i,
                    bytes: seg,
                },
            );
            m.apply(
                -1,
                0,
                MemEffect::Map {
                    va: 0x1000_0000 + i * seg,
                    bytes: seg,
                    handle: 100 + i,
                },
            );
        }
        assert_eq!(m.held_on(2), 4 * seg);
        // empty_cache: unmap and release each chunk.
        for i in 0..2u64 {
            m.apply(
                -1,
                0,
                MemEffect::Unmap {
                    va: 0x1000_0000 + i * seg,
                    bytes: seg,
                },
            );
            m.apply(-1, 0, MemEffect::Release { handle: 100 + i });
        }
        assert_eq!(m.held_on(2), 2 * seg);
        // Released while mapped (CUDA's samples do it): held until the unmap.
        m.apply(-1, 0, MemEffect::Release { handle: 102 });
        assert_eq!(m.held_on(2), 2 * seg);
        m.apply(-1, 0, MemEffect::Retain { handle: 103 });
        // One unmap over both remaining mappings.
        m.apply(
            -1,
            0,
            MemEffect::Unmap {
                va: 0x1000_0000 + 2 * seg,
                bytes: 2 * seg,
            },
        );
        assert_eq!(m.held_on(2), seg, "103 has two handle references left");
        m.apply(-1, 0, MemEffect::Release { handle: 103 });
        m.apply(-1, 0, MemEffect::Release { handle: 103 });
        assert_eq!(m.total(), 0);
        // Host memory (no device) is no GPU's.
        m.apply(
            -1,
            0,
            MemEffect::Create {
                handle: 7,
                bytes: seg,
            },
        );
        assert_eq!(m.total(), 0);
    }
}
