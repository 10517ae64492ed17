//! The JSON-lines form of an event (`FREERIDE_TRACE`). Field reference: the README, "The event trace".
//! Hand-written (no allocation beyond the output string, no dependency).
use crate::event::{Decoded, Event, Record};
use std::fmt::Write;

/// Appends one JSON line (with trailing newline) for `r` of process `pid` to `out`.
/// Records that fail validation are written as `{"kind":"invalid",...}`.
pub fn write_line(out: &mut String, pid: u32, r: &Record) {
    let Some(d) = Decoded::from_record(r) else {
        let _ = writeln!(
            out,
            r#"{{"t_ns":{},"pid":{},"kind":"invalid","api":"none","raw_kind":{},"raw_api":{}}}"#,
            r.t_ns, pid, r.kind, r.api
        );
        return;
    };
    let _ = write!(
        out,
        r#"{{"t_ns":{},"pid":{},"tid":{},"kind":"{}","api":"{}","device":"#,
        d.t_ns,
        pid,
        d.tid,
        d.kind.name(),
        d.api.name(),
    );
    let gpu = d.gpu();
    if gpu.is_known() {
        let _ = write!(out, r#""{gpu}""#);
    } else {
        out.push_str("null");
    }
    match d.event {
        Event::ProcessStart {
            role,
            ppid,
            capacity,
        } => {
            let _ = write!(
                out,
                r#","role":"{}","ppid":{},"ring_capacity":{}"#,
                role.map(|r| r.name()).unwrap_or("unknown"),
                ppid,
                capacity
            );
        }
        Event::ProcessExit { dropped } => {
            let _ = write!(out, r#","dropped":{dropped}"#);
        }
        Event::Launch {
            func,
            grid,
            block,
            shmem,
            in_comm,
        } => {
            let _ = write!(
                out,
                r#","stream":{},"func":{},"grid":[{},{},{}],"block":[{},{},{}],"shmem":{},"in_comm":{}"#,
                d.stream,
                func,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shmem,
                in_comm
            );
        }
        Event::GraphLaunch { graph } => {
            let _ = write!(out, r#","stream":{},"graph":{}"#, d.stream, graph);
        }
        Event::CommOp {
            dtype,
            peer,
            bytes,
            comm,
            op,
            group,
        } => {
            let _ = write!(
                out,
                r#","stream":{},"peer":{},"bytes":{},"dtype":{},"comm":{},"op":{},"group":{}"#,
                d.stream, peer, bytes, dtype, comm, op, group
            );
        }
        Event::CommGroup { depth, group } => {
            let _ = write!(out, r#","depth":{depth},"group":{group}"#);
        }
        Event::CommBegin {
            queued_ns,
            uncertainty_ns,
            op,
            group,
        }
        | Event::CommEnd {
            queued_ns,
            uncertainty_ns,
            op,
            group,
        } => {
            let _ = write!(
                out,
                r#","stream":{},"op":{},"group":{},"queued_ns":{},"uncertainty_ns":{}"#,
                d.stream, op, group, queued_ns, uncertainty_ns
            );
        }
        Event::Sync { end_ns, result } => {
            let _ = write!(
                out,
                r#","stream":{},"end_ns":{},"result":{}"#,
                d.stream, end_ns, result
            );
        }
        Event::MemAlloc { bytes, ptr, result } => {
            let _ = write!(
                out,
                r#","stream":{},"bytes":{},"ptr":{},"result":{}"#,
                d.stream, bytes, ptr, result
            );
        }
        Event::MemFree { ptr, result } => {
            let _ = write!(
                out,
                r#","stream":{},"ptr":{},"result":{}"#,
                d.stream, ptr, result
            );
        }
        Event::Dropped { count } => {
            let _ = write!(out, r#","count":{count}"#);
        }
        Event::MemMap {
            bytes,
            va,
            handle,
            result,
        } => {
            let _ = write!(
                out,
                r#","bytes":{bytes},"va":{va},"handle":{handle},"result":{result}"#
            );
        }
        Event::MemUnmap { bytes, va, result } => {
            let _ = write!(out, r#","bytes":{bytes},"va":{va},"result":{result}"#);
        }
        Event::DeviceInfo { ordinal, uuid } => {
            let _ = write!(
                out,
                r#","ordinal":{ordinal},"uuid":"{}""#,
                crate::gpu::uuid_text(&uuid)
            );
        }
        Event::EventRecord {
            event,
            op_key,
            flags,
            in_comm,
        } => {
            let _ = write!(
                out,
                r#","stream":{},"event":{event},"op_key":{op_key},"flags":{flags},"in_comm":{in_comm}"#,
                d.stream
            );
        }
        Event::StreamWait {
            event,
            op_key,
            wait,
            flags,
            in_comm,
        } => {
            let _ = write!(
                out,
                r#","stream":{},"event":{event},"op_key":{op_key},"wait":{wait},"flags":{flags},"in_comm":{in_comm}"#,
                d.stream
            );
        }
        Event::WaitBegin {
            queued_ns,
            uncertainty_ns,
            wait,
        }
        | Event::WaitEnd {
            queued_ns,
            uncertainty_ns,
            wait,
        } => {
            let _ = write!(
                out,
                r#","stream":{},"wait":{wait},"queued_ns":{queued_ns},"uncertainty_ns":{uncertainty_ns}"#,
                d.stream
            );
        }
        Event::CommUntimed { op, group, why } => {
            let _ = write!(
                out,
                r#","stream":{},"op":{op},"group":{group},"why":"{}""#,
                d.stream,
                why.map_or("unknown", |w| w.name())
            );
        }
        Event::WaitUntimed { wait, why } => {
            let _ = write!(
                out,
                r#","stream":{},"wait":{wait},"why":"{}""#,
                d.stream,
                why.map_or("unknown", |w| w.name())
            );
        }
        Event::CommInit {
            ident,
            comm,
            nranks,
            rank,
        } => {
            let _ = write!(
                out,
                r#","comm":{comm},"ident":{ident},"nranks":{nranks},"rank":{rank}"#
            );
        }
    }
    out.push_str("}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Api, Kind};

    #[test]
    fn launch_line() {
        let r = Record {
            t_ns: 5,
            kind: Kind::Launch as u8,
            api: Api::CudaLaunchKernelStub as u16,
            device: 0x1100,
            tid: 3,
            stream: 77,
            p1: 1 | 2 << 32,
            p2: 3 | (crate::event::pack_block(32, 1, 1) as u64) << 32,
            ..Default::default()
        };
        let mut s = String::new();
        write_line(&mut s, 11, &r);
        assert_eq!(
            s,
            "{\"t_ns\":5,\"pid\":11,\"tid\":3,\"kind\":\"launch\",\"api\":\"__cudaLaunchKernel\",\"device\":\"0000:11:00.0\",\"stream\":77,\"func\":0,\"grid\":[1,2,3],\"block\":[32,1,1],\"shmem\":0,\"in_comm\":false}\n"
        );
        s.clear();
        let w = Record {
            kind: Kind::StreamWait as u8,
            api: Api::CudaStreamWaitEvent as u16,
            device: -1,
            stream: 5,
            p0: 9,
            p1: 7,
            p2: 3,
            ..Default::default()
        };
        write_line(&mut s, 1, &w);
        assert!(
            s.contains(r#""device":null,"stream":5,"event":9,"op_key":7,"wait":3,"#),
            "{s}"
        );
        s.clear();
        let mut uuid = [0u8; 16];
        uuid[15] = 1;
        let info = Record {
            kind: Kind::DeviceInfo as u8,
            device: 0x1100,
            aux: 2,
            p1: u64::from_le_bytes(uuid[8..].try_into().unwrap()),
            ..Default::default()
        };
        write_line(&mut s, 1, &info);
        assert!(
            s.ends_with(
                r#""device":"0000:11:00.0","ordinal":2,"uuid":"GPU-00000000-0000-0000-0000-000000000001"}
"#
            ),
            "{s}"
        );
        s.clear();
        let untimed = Record {
            kind: Kind::CommUntimed as u8,
            api: Api::NcclGroupEnd as u16,
            device: 0x1100,
            stream: 4,
            aux: crate::event::Untimed::PoolFull as u32,
            p2: 6 << 32,
            ..Default::default()
        };
        write_line(&mut s, 1, &untimed);
        let init = Record {
            kind: Kind::CommInit as u8,
            api: Api::NcclCommInitRank as u16,
            device: 0x1100,
            aux: 1,
            p0: 99,
            p1: 0x7f,
            p2: 4,
            ..Default::default()
        };
        let mut line = String::new();
        write_line(&mut line, 1, &init);
        assert!(
            line.ends_with(
                r#""device":"0000:11:00.0","comm":127,"ident":99,"nranks":4,"rank":1}
"#
            ),
            "{line}"
        );
        assert!(
            s.ends_with(
                r#""stream":4,"op":0,"group":6,"why":"pool_full"}
"#
            ),
            "{s}"
        );
    }
}
