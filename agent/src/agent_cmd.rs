//! `freeride agent`: the per-node daemon. Reads every ring in the session directory, infers each
//! GPU's bubbles online, publishes its state (`agent-status.json`) and Prometheus metrics.
use clap::Args;
use freeride_abi::{now_ns, session};
use freeride_agent::grants::GrantPolicy;
use freeride_agent::node::Node;
use freeride_agent::watchdog::WatchdogPolicy;
use freeride_agent::{claim, report, status};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Session directory (default: `$FREERIDE_DIR`, else `/dev/shm/freeride-<uid>`). One agent per
    /// directory: a second one is refused (exit status 1).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Serve Prometheus metrics on 127.0.0.1:PORT (0: no metrics endpoint); --metrics-addr wins.
    #[arg(long, default_value_t = 9464)]
    metrics_port: u16,
    /// Serve Prometheus metrics on ADDR (HOST:PORT, e.g. 0.0.0.0:9464 for a scraper on another
    /// host; `off`: none). Default: 127.0.0.1:<--metrics-port>.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<String>,
    /// How often the rings are read while any process is watched, in microseconds (an idle node:
    /// every 5 ms).
    #[arg(long, default_value_t = 50, value_parser = at_least_one)]
    poll_us: u64,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
    /// Device memory of each GPU in MiB (e.g. 143771 for an H200): side tasks then get what the
    /// trainer leaves, minus --mem-reserve-mib, as their memory budget. Without it, grants carry no
    /// memory budget (side tasks keep their own caps).
    #[arg(long, value_name = "MIB")]
    gpu_mem_mib: Option<u64>,
    /// Memory kept free for the trainer's growth on every GPU, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    mem_reserve_mib: u64,
    /// Kill a side task whose oldest in-flight launch is this many ms past the time its gate
    /// admitted it for (stuck in a kernel, or stopped making progress); 0: never.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    sidetask_hang_ms: u64,
    /// Kill a side task that holds more device memory than its GPU's budget (--gpu-mem-mib) for
    /// this many ms.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    sidetask_mem_grace_ms: u64,
    /// Append every bubble found to PATH as JSON lines (for `freeride report`).
    #[arg(long, value_name = "PATH")]
    bubble_log: Option<PathBuf>,
}

/// A count's value: a whole number, at least 1 (clap names the flag and the value around the
/// message: "invalid value '-5' for '--poll-us <POLL_US>': must be at least 1").
fn at_least_one(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(v) if v >= 1 => Ok(v),
        Ok(_) => Err("must be at least 1".into()),
        Err(_) => match s.trim().parse::<i128>() {
            Ok(n) if n < 1 => Err("must be at least 1".into()),
            Ok(_) => Err("too large".into()),
            Err(_) => Err("must be a whole number, at least 1".into()),
        },
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Release);
}

fn serve_metrics(listener: TcpListener, text: Arc<Mutex<String>>) {
    for stream in listener.incoming() {
        let Ok(mut s) = stream else { continue };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        let body = text.lock().map(|t| t.clone()).unwrap_or_default();
        let _ = write!(
            s,
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    }
}

/// The metrics endpoint's address (None: none), checked to be HOST:PORT.
fn metrics_addr(a: &AgentArgs) -> Result<Option<String>, String> {
    let addr = match a.metrics_addr.as_deref() {
        Some("off") => return Ok(None),
        Some(addr) => addr.to_string(),
        None if a.metrics_port == 0 => return Ok(None),
        None => return Ok(Some(format!("127.0.0.1:{}", a.metrics_port))),
    };
    match std::net::ToSocketAddrs::to_socket_addrs(addr.as_str()).map(|mut it| it.next()) {
        Ok(Some(_)) => Ok(Some(addr)),
        Ok(None) => Err(format!("--metrics-addr {addr}: resolves to no address")),
        Err(e) => Err(format!("--metrics-addr {addr}: not HOST:PORT ({e})")),
    }
}

pub fn main(a: AgentArgs) -> i32 {
    if let Some(d) = a.duration {
        if !(d.is_finite() && d > 0.0) {
            eprintln!("freeride agent: --duration must be a positive number of seconds, got {d}");
            return 2;
        }
    }
    let addr = match metrics_addr(&a) {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("freeride agent: {e}");
            return 2;
        }
    };
    let dir = a.dir.clone().unwrap_or_else(session::resolve_dir);
    if let Err(e) = session::ensure_dir(&dir) {
        eprintln!("freeride agent: session directory {}: {e}", dir.display());
        return 2;
    }
    // Held until this function returns: exactly one agent serves a directory.
    let claim = match claim::claim(&dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("freeride agent: {e} {}", dir.display());
            return 1;
        }
    };
    let metrics = Arc::new(Mutex::new(String::new()));
    if let Some(addr) = addr {
        match TcpListener::bind(addr.as_str()) {
            Ok(l) => {
                let m = metrics.clone();
                let shown = l.local_addr().map_or(addr, |a| a.to_string());
                std::thread::spawn(move || serve_metrics(l, m));
                eprintln!("freeride agent: metrics on http://{shown}/metrics");
            }
            Err(e) => eprintln!("freeride agent: no metrics endpoint ({addr}: {e})"),
        }
    }
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack (poll on time).
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    eprintln!(
        "freeride agent: serving {} (pid {})",
        dir.display(),
        std::process::id()
    );
    let deadline = a.duration.map(|s| now_ns() + (s.max(0.0) * 1e9) as u64);
    let mut log = match &a.bubble_log {
        Some(p) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            Ok(f) => Some(std::io::BufWriter::new(f)),
            Err(e) => {
                eprintln!("freeride agent: cannot open {}: {e}", p.display());
                return 2;
            }
        },
        None => None,
    };
    let mut node = Node::with_grants_and_watchdog(
        &dir,
        GrantPolicy {
            gpu_mem_bytes: a.gpu_mem_mib.map(|m| m << 20),
            mem_reserve_bytes: a.mem_reserve_mib << 20,
            ..GrantPolicy::default()
        },
        WatchdogPolicy {
            hang_ns: a.sidetask_hang_ms.saturating_mul(1_000_000),
            mem_grace_ns: a.sidetask_mem_grace_ms.saturating_mul(1_000_000),
        },
    );
    // Trainers report their ops' ends lazily while no side task is on the node, unless
    // FREERIDE_COMM_ENDS=prompt (crate::ends).
    if std::env::var(freeride_abi::env::COMM_ENDS).as_deref() != Ok("prompt") {
        node = node.letting_ends_be_lazy();
    }
    let mut last_publish = 0u64;
    let mut bubbles = 0u64;
    while !STOP.load(Ordering::Acquire) && deadline.is_none_or(|d| now_ns() < d) {
        let now = now_ns();
        node.step(now);
        let closed = node.take_closed();
        bubbles += closed.len() as u64;
        if let Some(w) = &mut log {
            for b in &closed {
                let _ = writeln!(w, "{}", report::bubble_line(b));
            }
        }
        for w in node.take_warnings() {
            eprintln!("freeride agent: {w}");
        }
        if now.saturating_sub(last_publish) >= 100_000_000 {
            last_publish = now;
            let (gpus, procs) = (node.gpus(), node.processes());
            let mut state = status::to_json(now, std::process::id(), &gpus, &procs);
            if let Some(wd) = node.watchdog() {
                state["sidetasks"] = status::watchdog_json(wd);
            }
            state["sidetasks"]["tasks"] = status::sidetasks_json(&dir, &procs);
            // How the trainers are asked to report their ops' ends (crate::ends).
            state["ends"] = if node.ends_lazy_now() {
                "lazy"
            } else {
                "prompt"
            }
            .into();
            if let Err(e) = status::publish(&dir, &state) {
                eprintln!("freeride agent: cannot publish state: {e}");
            }
            if let Some(w) = &mut log {
                let _ = w.flush();
            }
            if let Ok(mut m) = metrics.lock() {
                *m = status::prometheus(&gpus, &procs);
                if let Some(wd) = node.watchdog() {
                    m.push_str(&status::watchdog_prometheus(wd));
                }
            }
        }
        node.wait(a.poll_us.max(1).saturating_mul(1000));
    }
    let _ = std::fs::remove_file(dir.join(status::STATUS_FILE));
    node.remove_files();
    drop(claim);
    eprintln!("freeride agent: stopped; {bubbles} bubbles found");
    0
}
