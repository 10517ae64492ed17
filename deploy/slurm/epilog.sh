#!/usr/bin/env bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/freeride/epilog.sh): stops the job's freeride agent
# (SIGTERM, then SIGKILL after 5 s) and removes its session directory.
set -uo pipefail
dir="/dev/shm/freeride-job${SLURM_JOB_ID:?}"
pid="$(cat "$dir/agent.pid" 2>/dev/null || true)"
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
fi
rm -rf -- "$dir"
exit 0
