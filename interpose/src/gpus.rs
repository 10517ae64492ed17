//! The process's GPUs by identity: device ordinal -> [`GpuId`] (the packed PCI bus id, the same in
//! every process whatever `CUDA_VISIBLE_DEVICES` made of its ordinals), resolved through the
//! driver once per device and process (`cuDeviceGetPCIBusId`; no context needed) and cached in a
//! fixed table, so that a hook reads its thread's cached GpuId as it reads the ordinal
//! ([`crate::rt::Thread::gpu`]).
//!
//! The thread that resolves a device first pushes its [`Kind::DeviceInfo`] record (ordinal, bus
//! id, UUID), so that readers can show what each GpuId is; a thread that asks meanwhile waits a
//! few microseconds at most (a bounded spin) for that record to be pushed, so that a record
//! naming the GPU follows it. Resolving is a slow path: the first
//! hook of a thread in a context, the first allocation on a device, a timing pool's creation. It
//! makes two driver calls and never allocates. A device the driver cannot name now (not
//! initialized yet, an ordinal past [`MAX_ORDINALS`]) reads [`GpuId::UNKNOWN`] and is asked again
//! the next time.
use crate::comm;
use crate::rt;
use freeride_abi::{Api, GpuId, Kind, Record};
use std::sync::atomic::{AtomicU64, Ordering};

/// Ordinals cached (a process sees at most this many devices; beyond: unknown).
pub const MAX_ORDINALS: usize = 64;

/// Per ordinal: 0 not resolved, [`PENDING`] | GpuId while its DeviceInfo is being pushed,
/// [`RESOLVED`] | GpuId once resolved.
static IDS: [AtomicU64; MAX_ORDINALS] = [const { AtomicU64::new(0) }; MAX_ORDINALS];
const RESOLVED: u64 = 1 << 32;
const PENDING: u64 = 1 << 33;
/// Spins of a thread that waits for another's DeviceInfo (tens of microseconds at most).
const PENDING_SPINS: u32 = 1 << 16;

/// The GPU of device ordinal `ordinal` of this process ([`GpuId::UNKNOWN`]: not known now).
#[inline]
pub fn of_ordinal(ordinal: i32) -> GpuId {
    if ordinal < 0 || ordinal as usize >= MAX_ORDINALS {
        return GpuId::UNKNOWN;
    }
    let v = IDS[ordinal as usize].load(Ordering::Acquire);
    if v & RESOLVED != 0 {
        return GpuId(v as u32);
    }
    resolve(ordinal)
}

#[cold]
#[inline(never)]
fn resolve(ordinal: i32) -> GpuId {
    let Some(d) = comm::driver() else {
        return GpuId::UNKNOWN;
    };
    let Some(gpu) = d.pci_bus_id(ordinal) else {
        return GpuId::UNKNOWN;
    };
    let slot = &IDS[ordinal as usize];
    if slot
        .compare_exchange(
            0,
            PENDING | gpu.0 as u64,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // Another thread names it: let its DeviceInfo go first (bounded: never a lock).
        for _ in 0..PENDING_SPINS {
            if slot.load(Ordering::Acquire) & RESOLVED != 0 {
                break;
            }
            std::hint::spin_loop();
        }
        return gpu;
    }
    if rt::active_now() {
        let uuid = d.uuid(ordinal).unwrap_or([0; 16]);
        rt::push(&Record {
            t_ns: rt::declaration_ns(),
            kind: Kind::DeviceInfo as u8,
            api: Api::None as u16,
            device: gpu.field(),
            tid: rt::THREAD.try_with(rt::tid).unwrap_or(0),
            aux: ordinal as u32,
            p0: u64::from_le_bytes(uuid[..8].try_into().unwrap_or([0; 8])),
            p1: u64::from_le_bytes(uuid[8..].try_into().unwrap_or([0; 8])),
            ..Default::default()
        });
    }
    slot.store(RESOLVED | gpu.0 as u64, Ordering::Release);
    gpu
}

/// Fork child (async-signal-safe stores only): the child pushes its own DeviceInfo records into
/// its new ring (the ids themselves do not change across fork).
pub fn reset_after_fork() {
    for s in IDS.iter() {
        s.store(0, Ordering::Relaxed);
    }
}
