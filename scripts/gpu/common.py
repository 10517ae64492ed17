"""Shared helpers of the GPU check (scripts/gpu-check.sh): logging, JSON, child processes,
statistics, and a Python writer/reader of freeride's per-GPU grant block.

No torch here: everything in this module works on a machine without a GPU.

Grant block layout (interpose/abi/src/grant.rs, little-endian, 4096-byte file `grant-<bus id>`,
e.g. `grant-0000:19:00.0`: named by the physical GPU, interpose/abi/src/gpu.rs):
  0 magic u64 "FRGRANT\\x01" | 8 version u32 = 2 | 12 device u32 (packed bus id) | 16 agent_pid u32 | 20 state u32
  64 epoch u64 (seqlock: odd while being written) | 72 open_until_ns | 80 budget_ns
  88 mem_budget_bytes | 96 heartbeat_ns   (all CLOCK_MONOTONIC ns)
"""
import json
import mmap
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

T_START = time.monotonic()


def now_ns():
    """CLOCK_MONOTONIC ns: the clock of freeride's events, grants and the agent."""
    return time.monotonic_ns()


def log(msg):
    sys.stderr.write("[%s +%6.1fs] %s\n" % (time.strftime("%H:%M:%S"), time.monotonic() - T_START, msg))
    sys.stderr.flush()


def write_json(path, obj):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return default


def pct(values, q):
    """q-th percentile (0..100) by linear interpolation; None for no values."""
    v = sorted(values)
    if not v:
        return None
    if len(v) == 1:
        return v[0]
    k = (len(v) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summary(values):
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p90": pct(values, 90),
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
    }


def median(values):
    return statistics.median(values) if values else None


def make_session_dir(path):
    """A freeride session directory: owned by us, mode 0700."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def tail(path, n=4000):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except Exception:
        return ""


class Child:
    """A child process with its output in a log file; stopped by pid, never by name."""

    def __init__(self, name, argv, log_path, env=None, cwd=None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.logf = open(log_path, "wb")
        self.started = time.monotonic()
        self.p = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                  stdin=subprocess.DEVNULL)
        shown = " ".join(os.path.basename(x) if os.path.isabs(x) else x for x in argv)
        log("started %s (pid %d): %s" % (name, self.p.pid, shown[:110] + ("..." if len(shown) > 110 else "")))

    def poll(self):
        return self.p.poll()

    def wait(self, timeout):
        try:
            return self.p.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig=signal.SIGTERM, grace=5.0):
        """Signal, wait up to `grace` s, then SIGKILL. Returns the exit status."""
        if self.p.poll() is None:
            try:
                self.p.send_signal(sig)
            except ProcessLookupError:
                pass
            if self.wait(grace) is None:
                log("%s (pid %d) did not stop after %s; SIGKILL" % (self.name, self.p.pid, sig))
                try:
                    self.p.kill()
                except ProcessLookupError:
                    pass
                self.wait(5.0)
        self.logf.close()
        return self.p.returncode

    def output_tail(self, n=3000):
        try:
            self.logf.flush()
        except Exception:
            pass
        return tail(self.log_path, n)


def run_child(name, argv, log_path, timeout, env=None, cwd=None):
    """Runs to completion with a timeout; returns (rc or None on timeout, seconds, output tail)."""
    c = Child(name, argv, log_path, env=env, cwd=cwd)
    rc = c.wait(timeout)
    if rc is None:
        log("%s timed out after %.0f s" % (name, timeout))
        c.stop(signal.SIGTERM, 5.0)
    else:
        c.logf.close()
    return rc, time.monotonic() - c.started, c.output_tail()


# ---------------------------------------------------------------- grant block

GRANT_MAGIC = int.from_bytes(b"FRGRANT\x01", "little")
GRANT_SIZE = 4096
# u64 indices
Q_MAGIC, Q_EPOCH, Q_UNTIL, Q_BUDGET, Q_MEM, Q_HEARTBEAT = 0, 8, 9, 10, 11, 12
# u32 indices
I_VERSION, I_DEVICE, I_PID, I_STATE = 2, 3, 4, 5


def pack_bus_id(bus_id):
    """A PCI bus id (`0000:19:00.0`, or nvidia-smi's `00000000:19:00.0`) packed as freeride's
    GpuId (interpose/abi/src/gpu.rs): domain << 16 | bus << 8 | device << 3 | function."""
    dom, bus, rest = bus_id.strip().split(":")
    dev, fn = rest.split(".")
    d = int(dom, 16)
    d = (d ^ (d >> 16)) & 0xFFFF
    return d << 16 | int(bus, 16) << 8 | (int(dev, 16) & 0x1F) << 3 | (int(fn, 16) & 7)


def bus_id_text(gpu):
    """The packed GpuId as the grant file names it (`0000:19:00.0`)."""
    return "%04x:%02x:%02x.%x" % (gpu >> 16, (gpu >> 8) & 0xFF, (gpu >> 3) & 0x1F, gpu & 7)


def gpu_of_ordinal(ordinal=0):
    """The packed GpuId of CUDA device `ordinal` (nvidia-smi's index: the GPU check's machine has
    one GPU, so CUDA's order and nvidia-smi's agree)."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", str(ordinal)],
                         capture_output=True, text=True, check=True).stdout
    return pack_bus_id(out.strip().splitlines()[0])


def grant_path_of(session_dir, ordinal=0):
    """`<session>/grant-<bus id>` of CUDA device `ordinal`."""
    return os.path.join(session_dir, "grant-" + bus_id_text(gpu_of_ordinal(ordinal)))


class GrantWriter:
    """The agent's side of the grant block's seqlock, from Python (an agent stand-in).

    Stores of aligned 8-byte items through a memoryview are single machine stores on x86-64, and
    x86-64 keeps stores in program order: epoch odd -> fields -> epoch even is seen in that order.
    """

    def __init__(self, path, device=0, create=True):
        """`path`: the block's file (`grant_path_of`); `device`: the GPU's packed GpuId."""
        self.path = path
        if create or not os.path.exists(path):
            d = os.path.dirname(path) or "."
            tmp = os.path.join(d, ".grant.tmp-py-%d" % os.getpid())
            # 0600, as the agent makes it: readers refuse a block that group or others may open
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(b"\0" * GRANT_SIZE)
            self._map(tmp)
            self.i[I_VERSION] = 2
            self.i[I_DEVICE] = device
            self.i[I_PID] = os.getpid()
            self.i[I_STATE] = 0
            self.q[Q_HEARTBEAT] = now_ns()
            self.q[Q_MAGIC] = GRANT_MAGIC
            os.replace(tmp, path)
        else:
            self._map(path)

    def _map(self, path):
        fd = os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, GRANT_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        mv = memoryview(self.mm)
        self.q = mv.cast("Q")
        self.i = mv.cast("I")

    def publish(self, open_, until_ns=0, budget_ns=0, mem_budget_bytes=0):
        e = self.q[Q_EPOCH] | 1
        self.q[Q_EPOCH] = e
        self.i[I_STATE] = 1 if open_ else 0
        self.q[Q_UNTIL] = int(until_ns)
        self.q[Q_BUDGET] = int(budget_ns)
        self.q[Q_MEM] = int(mem_budget_bytes)
        self.q[Q_HEARTBEAT] = now_ns()
        self.q[Q_EPOCH] = e + 1

    def open_for(self, dur_ns, budget_ns=None):
        until = now_ns() + int(dur_ns)
        self.publish(True, until, int(dur_ns) if budget_ns is None else budget_ns)
        return until

    def close(self):
        self.publish(False)

    def heartbeat(self):
        self.q[Q_HEARTBEAT] = now_ns()


class GrantMonitor(threading.Thread):
    """Samples a grant file (read-only) every ~200 µs: how many grants opened, and when it was open.
    Follows a replaced file (the agent creates it with a rename)."""

    def __init__(self, path, stale_ns=100_000_000):
        super().__init__(daemon=True)
        self.path = path
        self.stale_ns = stale_ns
        self.stop_flag = threading.Event()
        self.intervals = []  # [open_start_ns, open_end_ns] as sampled
        self.samples = 0
        self.opens = 0
        self.error = None

    def _map(self):
        try:
            st = os.stat(self.path)
            with open(self.path, "rb") as f:
                mm = mmap.mmap(f.fileno(), GRANT_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
            mv = memoryview(mm)
            return (st.st_dev, st.st_ino), mm, mv.cast("Q"), mv.cast("I")
        except Exception:
            return None

    def run(self):
        cur = None
        last_check = 0.0
        open_since = None
        try:
            while not self.stop_flag.is_set():
                t = time.monotonic()
                if cur is None or t - last_check > 0.1:
                    last_check = t
                    try:
                        st = os.stat(self.path)
                        ident = (st.st_dev, st.st_ino)
                    except OSError:
                        ident = None
                    if ident is not None and (cur is None or cur[0] != ident):
                        cur = self._map()  # old mappings are left to the GC (readers only)
                if cur is None:
                    time.sleep(0.002)
                    continue
                _, _, q, i = cur
                now = now_ns()
                is_open = False
                if q[Q_MAGIC] == GRANT_MAGIC:
                    e1 = q[Q_EPOCH]
                    st_ = i[I_STATE]
                    until = q[Q_UNTIL]
                    hb = q[Q_HEARTBEAT]
                    if e1 & 1 == 0 and q[Q_EPOCH] == e1:
                        is_open = st_ == 1 and until > now and now - hb <= self.stale_ns
                    else:
                        is_open = open_since is not None
                self.samples += 1
                if is_open and open_since is None:
                    open_since = now
                    self.opens += 1
                elif not is_open and open_since is not None:
                    self.intervals.append([open_since, now])
                    open_since = None
                time.sleep(0.0002)
            if open_since is not None:
                self.intervals.append([open_since, now_ns()])
        except Exception as e:  # never take the orchestrator down
            self.error = repr(e)

    def stop(self):
        self.stop_flag.set()
        self.join(2.0)

    def stats(self, t0, t1):
        """Grants seen opening, and the share of [t0, t1] they were open."""
        opened = 0
        open_ns = 0
        for a, b in self.intervals:
            lo, hi = max(a, t0), min(b, t1)
            if hi > lo:
                open_ns += hi - lo
            if t0 <= a <= t1:
                opened += 1
        span = max(1, t1 - t0)
        return {"grants_opened_in_window": opened, "grant_open_share": open_ns / span,
                "grants_opened_total": self.opens, "samples": self.samples, "error": self.error}


def torch_or_exit(what):
    """Imports torch, or exits 3 with a clear message (so --help works without torch)."""
    try:
        import torch  # noqa: F401
        return torch
    except Exception as e:
        sys.stderr.write("%s: cannot import torch: %r\n" % (what, e))
        sys.exit(3)
