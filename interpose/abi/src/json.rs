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
        r#"{{"t_ns":{},"pid":{},"tid":{},"kind":"{}","api":"{}","device":{}"#,
        d.t_ns,
        pid,
        d.tid,
        d.kind.name(),
        d.api.name(),
        d.device
    );
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
            device: 0,
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
            "{\"t_ns\":5,\"pid\":11,\"tid\":3,\"kind\":\"launch\",\"api\":\"__cudaLaunchKernel\",\"device\":0,\"stream\":77,\"func\":0,\"grid\":[1,2,3],\"block\":[32,1,1],\"shmem\":0,\"in_comm\":false}\n"
        );
    }
}
