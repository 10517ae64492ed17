use super::*;

#[test]
fn memory_records_say_what_they_do_to_the_memory_held() {
    let rec = |kind: Kind, api: Api, p: [u64; 3], aux: u32| {
        Decoded::from_record(&Record {
            kind: kind as u8,
            api: api as u16,
            aux,
            p0: p[0],
            p1: p[1],
            p2: p[2],
            ..Default::default()
        })
        .unwrap()
        .mem_effect()
    };
    use MemEffect::*;
    let alloc = Kind::MemAlloc;
    assert_eq!(
        rec(alloc, Api::CuMemAllocPitchV2, [4096, 0x10, 0], 0),
        Some(Alloc {
            ptr: 0x10,
            bytes: 4096
        })
    );
    assert_eq!(
        rec(alloc, Api::CuMemCreate, [2 << 20, 7, 0], 0),
        Some(Create {
            handle: 7,
            bytes: 2 << 20
        })
    );
    assert_eq!(
        rec(alloc, Api::CuMemRetainAllocationHandle, [0, 7, 0], 0),
        Some(Retain { handle: 7 })
    );
    // Failed or empty calls do nothing.
    assert_eq!(rec(alloc, Api::CuMemAllocV2, [64, 0, 0], 2), None);
    assert_eq!(rec(alloc, Api::CuMemCreate, [64, 9, 0], 2), None);
    assert_eq!(
        rec(Kind::MemFree, Api::CuMemRelease, [0, 7, 0], 0),
        Some(Release { handle: 7 })
    );
    assert_eq!(
        rec(Kind::MemFree, Api::CuMemFreeAsync, [0, 0x10, 0], 0),
        Some(Free { ptr: 0x10 })
    );
    assert_eq!(
        rec(Kind::MemMap, Api::CuMemMap, [2 << 20, 0x4000, 7], 0),
        Some(Map {
            va: 0x4000,
            bytes: 2 << 20,
            handle: 7
        })
    );
    assert_eq!(
        rec(Kind::MemUnmap, Api::CuMemUnmap, [2 << 20, 0x4000, 0], 0),
        Some(Unmap {
            va: 0x4000,
            bytes: 2 << 20
        })
    );
    assert_eq!(rec(Kind::MemUnmap, Api::CuMemUnmap, [1, 2, 0], 1), None);
}

#[test]
fn record_roundtrip() {
    let r = Record {
        t_ns: 123,
        kind: Kind::Launch as u8,
        flags: 7,
        api: Api::CuLaunchKernelEx as u16,
        device: -1,
        tid: 99,
        aux: 4096,
        stream: 0xdead,
        p0: 1,
        p1: 2 | 3 << 32,
        p2: 4 | (pack_block(128, 2, 1) as u64) << 32,
    };
    assert_eq!(Record::decode(&r.encode()), r);
    let d = Decoded::from_record(&r).unwrap();
    assert_eq!(
        d.event,
        Event::Launch {
            func: 1,
            grid: [2, 3, 4],
            block: [128, 2, 1],
            shmem: 4096,
            in_comm: true
        }
    );
}

/// The words of every record kind of ring layout 2, as the interposer writes them, decode to
/// the fields docs/events.md names.
#[test]
fn identity_wait_and_untimed_records_decode() {
    let dec = |kind: Kind, aux: u32, flags: u8, p: [u64; 3]| {
        let r = Record {
            t_ns: 10,
            kind: kind as u8,
            flags,
            api: Api::CuStreamWaitEvent as u16,
            device: 0x1100,
            tid: 1,
            aux,
            stream: 0x77,
            p0: p[0],
            p1: p[1],
            p2: p[2],
        };
        assert_eq!(Record::decode(&r.encode()), r);
        let d = Decoded::from_record(&r).unwrap();
        assert_eq!(d.gpu(), crate::gpu::GpuId::new(0, 0x11, 0, 0));
        assert_eq!(d.stream, 0x77);
        d.event
    };
    let mut uuid = [0u8; 16];
    uuid[0] = 0xab;
    uuid[9] = 0xcd;
    assert_eq!(
        dec(
            Kind::DeviceInfo,
            3,
            0,
            [
                u64::from_le_bytes(uuid[..8].try_into().unwrap()),
                u64::from_le_bytes(uuid[8..].try_into().unwrap()),
                0
            ]
        ),
        Event::DeviceInfo { ordinal: 3, uuid }
    );
    assert_eq!(
        dec(Kind::EventRecord, 1, LAUNCH_FLAG_COMM, [0xe1, 5 << 32, 0]),
        Event::EventRecord {
            event: 0xe1,
            op_key: 5 << 32,
            flags: 1,
            in_comm: true
        }
    );
    assert_eq!(
        dec(Kind::StreamWait, 0, 0, [0xe1, 9, 4]),
        Event::StreamWait {
            event: 0xe1,
            op_key: 9,
            wait: 4,
            flags: 0,
            in_comm: false
        }
    );
    for k in [Kind::WaitBegin, Kind::WaitEnd] {
        let e = dec(k, 0, 0, [100, 7, 4]);
        let want = (100, 7, 4);
        match e {
            Event::WaitBegin {
                queued_ns,
                uncertainty_ns,
                wait,
            }
            | Event::WaitEnd {
                queued_ns,
                uncertainty_ns,
                wait,
            } => assert_eq!((queued_ns, uncertainty_ns, wait), want),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        dec(
            Kind::CommUntimed,
            Untimed::Capturing as u32,
            0,
            [0, 0, 3 | 8 << 32]
        ),
        Event::CommUntimed {
            op: 3,
            group: 8,
            why: Some(Untimed::Capturing)
        }
    );
    assert_eq!(
        dec(Kind::WaitUntimed, 99, 0, [0, 0, 4]),
        Event::WaitUntimed { wait: 4, why: None }
    );
    assert_eq!(
        dec(Kind::CommInit, 3, 0, [0xabc, 0x7f00, 8]),
        Event::CommInit {
            ident: 0xabc,
            comm: 0x7f00,
            nranks: 8,
            rank: 3
        }
    );
    assert_eq!(op_key(3, 0), 3);
    assert_eq!(op_key(3, 8), 8 << 32);
    for w in 1..=6 {
        let u = Untimed::from_u32(w).unwrap();
        assert_eq!(u as u32, w);
        assert!(!u.name().is_empty());
    }
    assert_eq!(Untimed::from_u32(0), None);
    // Every kind number decodes to its own kind, and names are unique.
    let mut names = std::collections::HashSet::new();
    for v in 0..=255u8 {
        if let Some(k) = Kind::from_u8(v) {
            assert_eq!(k as u8, v);
            assert!(names.insert(k.name()));
        }
    }
    assert!(names.contains("stream_wait") && names.contains("comm_untimed"));
}

#[test]
fn communicator_identities_agree_across_ranks_and_differ_between_communicators() {
    let mut id = [7u8; 128];
    let a = comm_ident_of_id(&id);
    assert_eq!(a, comm_ident_of_id(&id.clone()));
    id[100] = 8;
    assert_ne!(a, comm_ident_of_id(&id));
    // Splits: the same parent, split and colour give the same identity on every rank.
    assert_eq!(comm_ident_of_split(a, 0, 1), comm_ident_of_split(a, 0, 1));
    assert_ne!(comm_ident_of_split(a, 0, 1), comm_ident_of_split(a, 0, 2));
    assert_ne!(comm_ident_of_split(a, 0, 1), comm_ident_of_split(a, 1, 1));
    assert_ne!(comm_ident_local(5, 0), comm_ident_local(6, 0));
    assert_ne!(comm_ident_local(5, 0), comm_ident_local(5, 1));
    // Never 0 (0 is "no identity" to a reader).
    assert_ne!(comm_ident_of_id(&[]), 0);
}

#[test]
fn api_names_unique_and_roundtrip() {
    let mut seen = std::collections::HashSet::new();
    for a in Api::ALL {
        assert!(seen.insert(a.name()));
        assert_eq!(Api::from_name(a.name()), Some(*a));
        assert_eq!(Api::from_u16(*a as u16), Some(*a));
    }
}

#[test]
fn unknown_kind_rejected() {
    let r = Record {
        kind: 200,
        ..Default::default()
    };
    assert!(Decoded::from_record(&r).is_none());
    let r = Record {
        kind: 3,
        api: 9999,
        ..Default::default()
    };
    assert!(Decoded::from_record(&r).is_none());
}
