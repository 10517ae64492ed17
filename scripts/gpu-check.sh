#!/usr/bin/env bash
# The real-GPU check of freeride (issue #7), in one command, on a machine with an NVIDIA GPU, CUDA 13,
# PyTorch, Triton and NCCL, but no Rust and no network: it uses binaries built beforehand
# (target/release/: freeride, libfreeride.so, libfreeride_sidetask.so, examples/{train_loop,pagerank,image_batch}).
#
#   scripts/gpu-check.sh            # all parts, about 5-8 minutes, never more than GPU_CHECK_BUDGET_S
#
# Parts (details: scripts/gpu/README.md):
#   1. coverage   kernels freeride counts per launch path vs the PyTorch profiler (native ops, cuBLAS,
#                 Triton, CUDA graph, world-size-1 NCCL group, a training step) + NCCL comm events
#   2. hook cost  tiny launches and a transformer block's training step, with/without freeride, alternating
#   3. gating     trainer with real compute and real (NCCL) idle gaps + a PyTorch side task: alone, gated
#                 (real agent; Python grant stand-in), ungated; then the same under CUDA MPS
# Every step has its own timeout and the whole run a deadline; a failed part does not stop the others.
# Output: progress lines on stderr, a Markdown table on stderr, and the summary JSON as the LAST line of
# stdout; with $OUT set, results/ (all JSON, the table, logs) are copied to $OUT/gpu-check/.
#
# Environment: PYTHON (default python3), FREERIDE_BIN (default <repo>/target/release),
#   GPU_CHECK_BUDGET_S (default 480), GPU_CHECK_SKIP (comma list of: coverage,hook_cost,hook_bench,sdk_tasks,gate_probe,
#   gating_default,gating_mps), GPU_CHECK_WORK (work folder; default a new /tmp/freeride-gpucheck.XXXXXX).
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FREERIDE_BIN:-$ROOT/target/release}"
PY="${PYTHON:-python3}"
GPU="$ROOT/scripts/gpu"
BUDGET="${GPU_CHECK_BUDGET_S:-480}"
SKIP=",${GPU_CHECK_SKIP:-},"
START=$(date +%s)
DEADLINE=$((START + BUDGET))
WORK="${GPU_CHECK_WORK:-$(mktemp -d /tmp/freeride-gpucheck.XXXXXX)}"
RES="$WORK/results"
mkdir -p "$RES"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    SESS="$(mktemp -d /dev/shm/freeride-gpucheck.XXXXXX)"
else
    SESS="$(mktemp -d /tmp/freeride-gpucheck-sess.XXXXXX)"
fi
chmod 700 "$SESS"
export TRITON_CACHE_DIR="$WORK/triton-cache"
export PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1
MPS_PIPE=/tmp/mps-pipe
MPS_LOG=/tmp/mps-log
MPS_STARTED=0

# dl SECONDS: a wall-clock deadline for an orchestrator: SECONDS from now, but never past the run's.
dl() { local d=$(($(date +%s) + $1)) m=$((DEADLINE - 25)); [ "$d" -gt "$m" ] && d=$m; echo "$d"; }

log() { printf '[%s +%ds] %s\n' "$(date +%H:%M:%S)" $(($(date +%s) - START)) "$*" >&2; }

mps_stop() {
    if [ "$MPS_STARTED" = 1 ]; then
        log "mps: stopping the MPS control daemon"
        echo quit | CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG" \
            timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
        local rc=$?
        MPS_STARTED=0
        # wait (bounded) until the daemon is gone
        for _ in $(seq 1 40); do
            pgrep -x nvidia-cuda-mps-control >/dev/null 2>&1 || break
            sleep 0.25
        done
        if pgrep -x nvidia-cuda-mps-control >/dev/null 2>&1; then
            log "mps: WARNING: nvidia-cuda-mps-control still running after quit"
            return 1
        fi
        return $rc
    fi
    return 0
}

copy_out() {
    [ -n "${OUT:-}" ] || return 0
    mkdir -p "$OUT/gpu-check" 2>/dev/null || return 0
    # The device tool brings back at most 8 files: the summary apart, everything else in one archive
    # (every result JSON, and the logs and small per-configuration files: no profiler traces, no big
    # event traces).
    cp "$RES/summary.json" "$RES/summary.md" "$OUT/gpu-check/" 2>/dev/null
    (cd "$WORK" && find . -path ./triton-cache -prune -o -type f \( -name '*.log' -o -name '*.json' \
        -o -name '*.steps' -o -name '*.txt' -o -name '*.md' \) ! -name 'prof-*' -size -4M -print0 2>/dev/null \
        | tar -czf "$OUT/gpu-check/results.tar.gz" --null -T - 2>/dev/null)
    log "results copied to \$OUT/gpu-check (summary.json, summary.md, results.tar.gz)"
}

cleanup() {
    mps_stop || true
    rm -rf "$SESS" 2>/dev/null
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# step NAME TIMEOUT CMD...: runs CMD with its own timeout (shortened to the deadline), output to
# $WORK/NAME.log, progress lines (those starting with "[HH:MM:SS +") shown on stderr; records
# $RES/step-NAME.json = {rc, seconds, timeout, skipped}.
step() {
    local name="$1" tmo="$2"
    shift 2
    local left=$((DEADLINE - $(date +%s) - 25))
    case "$SKIP" in *",$name,"*)
        log "$name: skipped (GPU_CHECK_SKIP)"
        echo '{"skipped": true, "why": "GPU_CHECK_SKIP"}' >"$RES/step-$name.json"
        return 0 ;;
    esac
    [ "$tmo" -gt "$left" ] && tmo=$left
    if [ "$tmo" -lt 15 ]; then
        log "$name: skipped (out of time)"
        echo '{"skipped": true, "why": "out of time"}' >"$RES/step-$name.json"
        return 0
    fi
    log "$name: start (timeout ${tmo}s)"
    local t0 rc
    t0=$(date +%s)
    timeout -k 10 "$tmo" "$@" 2>&1 | tee "$WORK/$name.log" | grep --line-buffered -E '^\[[0-9]{2}:[0-9]{2}:[0-9]{2} \+' >&2
    rc=${PIPESTATUS[0]}
    local secs=$(($(date +%s) - t0))
    echo "{\"rc\": $rc, \"seconds\": $secs, \"timeout\": $tmo, \"skipped\": false}" >"$RES/step-$name.json"
    if [ "$rc" -ne 0 ]; then
        log "$name: FAILED rc=$rc after ${secs}s$([ "$rc" -eq 124 ] && echo ' (timeout)'); last lines of $name.log:"
        tail -n 15 "$WORK/$name.log" | sed 's/^/    | /' >&2
    else
        log "$name: done in ${secs}s"
    fi
    return 0
}

log "gpu-check: repo $ROOT, binaries $BIN, python $PY, work $WORK, budget ${BUDGET}s"

# ---------------------------------------------------------------- 0. preflight
missing=""
for f in "$BIN/libfreeride.so" "$BIN/freeride"; do
    [ -e "$f" ] || missing="$missing $f"
done
if [ -n "$missing" ]; then
    log "MISSING built files:$missing (build on an x86-64 machine: cargo build --release -p freeride-agent -p freeride-interpose; carry them)"
fi
timeout 30 nvidia-smi >"$WORK/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed (see nvidia-smi.txt)"
timeout 120 "$PY" - "$RES/env.json" "$BIN" "$missing" >"$WORK/preflight.log" 2>&1 <<'PY'
import hashlib, json, os, subprocess, sys, time
out, bindir, missing = sys.argv[1], sys.argv[2], sys.argv[3]
env = {"python": sys.version.split()[0], "missing_binaries": missing.split()}
def q(args):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:
        return "error: %r" % (e,)
line = q(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_mode", "--format=csv,noheader"])
parts = [p.strip() for p in line.splitlines()[0].split(",")] if line and not line.startswith("error") else []
env.update(dict(zip(["gpu", "driver", "gpu_memory", "compute_mode"], parts)))
env["gpus_visible"] = len(line.splitlines()) if parts else 0
env["gpu_processes_before"] = q(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"])
for f in ("libfreeride.so", "freeride", "libfreeride_sidetask.so", "examples/train_loop", "examples/pagerank", "examples/image_batch"):
    p = os.path.join(bindir, f)
    try:
        with open(p, "rb") as fh:
            env.setdefault("binaries", {})[f] = {"sha256": hashlib.sha256(fh.read()).hexdigest()[:16],
                                                 "mtime": time.strftime("%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(p)))}
    except OSError as e:
        env.setdefault("binaries", {})[f] = "missing"
try:
    import torch
    env["torch"] = torch.__version__
    env["torch_cuda"] = torch.version.cuda
    env["cuda_available"] = torch.cuda.is_available()
    try:
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:
        env["nccl"] = "error: %r" % (e,)
    if torch.cuda.is_available():
        env["torch_device"] = torch.cuda.get_device_name(0)
except Exception as e:
    env["torch"] = "import failed: %r" % (e,)
try:
    import triton
    env["triton"] = triton.__version__
except Exception as e:
    env["triton"] = "import failed: %r" % (e,)
env["mps_control"] = q(["sh", "-c", "command -v nvidia-cuda-mps-control"]) or "not found"
json.dump(env, open(out, "w"), indent=1)
print("[%s +0s] preflight: %s, driver %s, torch %s, NCCL %s, triton %s" % (time.strftime("%H:%M:%S"),
      env.get("gpu"), env.get("driver"), env.get("torch"), env.get("nccl"), env.get("triton")))
PY
grep -E '^\[' "$WORK/preflight.log" >&2 || { log "preflight failed:"; tail -n 20 "$WORK/preflight.log" >&2; }

# ---------------------------------------------------------------- 1. coverage
COVSESS="$SESS/coverage"
mkdir -m 700 -p "$COVSESS"
rm -f "$WORK/coverage-trace.jsonl"
step coverage 110 "$BIN/freeride" run --role trainer --dir "$COVSESS" --trace "$WORK/coverage-trace.jsonl" -- \
    "$PY" "$GPU/coverage.py" run --raw "$WORK/coverage-raw.json" --workdir "$WORK/coverage"
# the analysis needs no GPU and takes seconds: run it even after a timeout (partial phases count)
if [ -e "$WORK/coverage-raw.json" ]; then
    log "coverage_analyze: start"
    timeout 40 "$PY" "$GPU/coverage.py" analyze --raw "$WORK/coverage-raw.json" \
        --trace "$WORK/coverage-trace.jsonl" --out "$RES/coverage.json" >"$WORK/coverage_analyze.log" 2>&1
    rc=$?
    grep -E '^\[' "$WORK/coverage_analyze.log" >&2
    [ $rc -ne 0 ] && { log "coverage_analyze: FAILED rc=$rc"; tail -n 15 "$WORK/coverage_analyze.log" | sed 's/^/    | /' >&2; }
fi

# ---------------------------------------------------------------- 2. hook cost
# launch_bench.c: the host cost of cuLaunchKernel on the real driver, 1/2/4 threads, without and with
# freeride (built here: the GPU host has a C compiler; skipped where it has none).
LAUNCH_BENCH=""
if command -v cc >/dev/null 2>&1 && cc -O2 -o "$WORK/launch_bench" "$GPU/launch_bench.c" -ldl -lpthread \
    >"$WORK/launch_bench-build.log" 2>&1; then
    LAUNCH_BENCH="$WORK/launch_bench"
else
    log "hook_cost: launch_bench not built (no cc?): see launch_bench-build.log"
fi
step hook_cost "${GPU_CHECK_HOOK_TIMEOUT:-130}" "$PY" "$GPU/hook_cost.py" orchestrate --bin "$BIN" --python "$PY" \
    --out "$RES/hook_cost.json" --workdir "$WORK/hook" --session-root "$SESS" --reps "${GPU_CHECK_HOOK_REPS:-3}" \
    --conds "${GPU_CHECK_HOOK_CONDS:-off,on}" --steps "${GPU_CHECK_HOOK_STEPS:-50}" --cpus "${GPU_CHECK_HOOK_CPUS:-2-9}" \
    ${LAUNCH_BENCH:+--launch-bench "$LAUNCH_BENCH"} --deadline "$(dl "${GPU_CHECK_HOOK_TIMEOUT:-130}")"

# ---------------------------------------------------------------- 2b. the hook alone, on this host's CPU
# scripts/bench-hook from prebuilt files ($BIN/bench/: bench_hook, libcuda.so.1 built from
# tests/cprogs/bench_drv.c, and $BIN/libfreeride.so): per-launch overhead with 1, 2 and 4 threads and the
# hook clock (whether this host's kernel lets the TSC be trusted). No GPU work; seconds.
if [ -x "$BIN/bench/bench_hook" ] && [ -e "$BIN/bench/libcuda.so.1" ]; then
    mkdir -p "$WORK/hook_bench"
    cp "$BIN/libfreeride.so" "$WORK/hook_bench/" 2>/dev/null
    cp "$BIN/bench/bench_hook" "$BIN/bench/libcuda.so.1" "$WORK/hook_bench/" 2>/dev/null
    step hook_bench 90 env FREERIDE_BENCH_PREBUILT="$WORK/hook_bench" FREERIDE_BENCH_CALLGRIND=0 \
        sh -c '"$1" >"$2"' sh "$ROOT/scripts/bench-hook" "$RES/hook_bench.json"
else
    log "hook_bench: skipped (no $BIN/bench/bench_hook carried)"
    echo '{"skipped": true, "why": "not carried"}' >"$RES/step-hook_bench.json"
fi

# ---------------------------------------------------------------- SDK side tasks on the GPU
# The SDK's examples and the Python package's PyTorch example, standalone, a few steps each: their
# GPU work is cuBLAS GEMMs (sidetask-sdk/src/blas.rs), which need libcublas on the loader path
# (PyTorch's nvidia/cublas/lib when CUDA's lib64 has none).
CUBLAS_DIR="$("$PY" -c 'import nvidia.cublas as c, os; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null || true)"
step sdk_tasks 60 env LD_LIBRARY_PATH="${CUBLAS_DIR:+$CUBLAS_DIR:}${LD_LIBRARY_PATH:-}" FREERIDE_DIR="$SESS/sdk" \
    FREERIDE_SIDETASK_LIB="$BIN/libfreeride_sidetask.so" PYTHONPATH="$ROOT/sidetask-sdk/python" \
    "$PY" - "$BIN" "$RES/sdk_probe.json" <<'PY'
import json, subprocess, sys, time
bin_dir, out = sys.argv[1], sys.argv[2]
runs = {
    "train_loop": [bin_dir + "/examples/train_loop", "--steps", "20", "--batch", "256"],
    "pagerank": [bin_dir + "/examples/pagerank", "--nodes", "4000", "--vectors", "64", "--iterations", "20"],
    "image_batch": [bin_dir + "/examples/image_batch", "--images", "20", "--size", "512", "--out-size", "256"],
    "torch_sidetask": [sys.executable, "-m", "freeride.examples.torch_sidetask", "--steps", "20"],
}
res = {}
for name, cmd in runs.items():
    t0 = time.time()
    try:
        p = subprocess.run(cmd + ["--device", "0", "--standalone"], capture_output=True, text=True, timeout=45)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        try:
            summary = json.loads(last)
        except ValueError:
            summary = None
        res[name] = {"rc": p.returncode, "seconds": round(time.time() - t0, 1), "summary": summary,
                     "stderr_tail": p.stderr[-800:]}
    except Exception as e:
        res[name] = {"rc": None, "error": repr(e)}
    s = res[name].get("summary") or {}
    print("[%s +0s] sdk_tasks: %s rc=%s state=%s steps=%s gpu_busy_ms=%s last_step_ms=%s" % (
        time.strftime("%H:%M:%S"), name, res[name].get("rc"), s.get("state"), s.get("steps"),
        s.get("gpu_busy_ms"), s.get("last_step_ms")), flush=True)
json.dump(res, open(out, "w"), indent=1)
sys.exit(0 if all(r.get("rc") == 0 and (r.get("summary") or {}).get("state") == "finished" for r in res.values()) else 1)
PY

# ---------------------------------------------------------------- 3a. the gate alone
# The gated PyTorch side task with its grant held open by this script (no trainer, no agent), then
# held closed: it must step when open and not when closed (gate_probe.py).
step gate_probe 60 "$PY" "$GPU/gate_probe.py" --bin "$BIN" --python "$PY" --out "$RES/gate_probe.json" \
    --workdir "$WORK/gate_probe" --session-root "$SESS"

# ---------------------------------------------------------------- 3. gating, default time-slicing
step gating_default 190 "$PY" "$GPU/gating.py" --mode default --bin "$BIN" --python "$PY" \
    --out "$RES/gating_default.json" --workdir "$WORK/gating" --session-root "$SESS" --deadline "$(dl 180)" \
    --configs "${GPU_CHECK_GATING_CONFIGS:-alone,side_alone,gated_agent,gated_standin,ungated,alone_stall,gated_agent_stall}"

# ---------------------------------------------------------------- 3b. gating under MPS
case "$SKIP" in *",gating_mps,"*) echo '{"started": false, "why": "GPU_CHECK_SKIP"}' >"$RES/mps.json" ;; *)
    if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
        log "mps: nvidia-cuda-mps-control not found; MPS part skipped"
        echo '{"started": false, "why": "nvidia-cuda-mps-control not found"}' >"$RES/mps.json"
    elif [ $((DEADLINE - $(date +%s))) -lt 70 ]; then
        log "mps: skipped (out of time)"
        echo '{"started": false, "why": "out of time"}' >"$RES/mps.json"
    else
        mkdir -p "$MPS_PIPE" "$MPS_LOG"
        log "mps: starting the MPS control daemon (pipe $MPS_PIPE, log $MPS_LOG)"
        if CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG" \
            timeout 20 nvidia-cuda-mps-control -d >"$WORK/mps-start.log" 2>&1; then
            MPS_STARTED=1
            sleep 1
            export CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG"
            step gating_mps 120 "$PY" "$GPU/gating.py" --mode mps --bin "$BIN" --python "$PY" \
                --out "$RES/gating_mps.json" --workdir "$WORK/gating" --session-root "$SESS" --deadline "$(dl 110)" \
                --calib "$RES/gating_default.json" --configs alone,gated_agent,ungated,side_alone
            unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
            cp "$MPS_LOG/control.log" "$WORK/mps-control.log" 2>/dev/null
            cp "$MPS_LOG/server.log" "$WORK/mps-server.log" 2>/dev/null
            if mps_stop; then stopped=true; else stopped=false; fi
            echo "{\"started\": true, \"stopped\": $stopped, \"pipe\": \"$MPS_PIPE\", \"log\": \"$MPS_LOG\"}" >"$RES/mps.json"
        else
            log "mps: could not start the daemon: $(tail -n 3 "$WORK/mps-start.log" | tr '\n' ' ')"
            echo "{\"started\": false, \"why\": \"nvidia-cuda-mps-control -d failed\"}" >"$RES/mps.json"
        fi
    fi ;;
esac

# ---------------------------------------------------------------- summary
ELAPSED=$(($(date +%s) - START))
log "summary (elapsed ${ELAPSED}s)"
timeout 60 "$PY" "$GPU/summarize.py" --results "$RES" --json "$RES/summary.json" --md "$RES/summary.md" \
    --elapsed "$ELAPSED" >"$WORK/summary.stdout" 2>"$WORK/summary.stderr"
src=$?
cat "$WORK/summary.stderr" >&2
copy_out
if [ $src -ne 0 ] || [ ! -s "$WORK/summary.stdout" ]; then
    log "summarize failed (rc=$src)"
    echo "{\"check\":\"freeride scripts/gpu-check.sh\",\"error\":\"summarize failed rc=$src\",\"results\":\"$RES\"}"
    exit 1
fi
tail -n 1 "$WORK/summary.stdout"
