#!/usr/bin/env bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/freeride/prolog.sh, PrologFlags=Alloc so it runs on
# every node of the allocation at its start): one freeride agent per node and job, as the job's
# user, serving /dev/shm/freeride-job<SLURM_JOB_ID>. epilog.sh stops it and removes the directory.
# Ranks run under freeride with freeride-rank (srun freeride-rank python train.py ...).
set -euo pipefail
FREERIDE="${FREERIDE:-/usr/local/bin/freeride}"
dir="/dev/shm/freeride-job${SLURM_JOB_ID:?}"
user="${SLURM_JOB_USER:?}"
log="/var/log/freeride/agent-job${SLURM_JOB_ID}.log"
mkdir -p /var/log/freeride
install -d -m 0700 -o "$user" "$dir"
# setsid: the agent outlives the prolog; the epilog ends it.
setsid runuser -u "$user" -- "$FREERIDE" agent --dir "$dir" \
    --metrics-addr "${FREERIDE_METRICS_ADDR:-127.0.0.1:9464}" </dev/null >>"$log" 2>&1 &
# Wait (at most 5 s) until it has claimed the directory, so the job's ranks find it.
for _ in $(seq 50); do
    [ -s "$dir/agent.pid" ] && exit 0
    sleep 0.1
done
echo "freeride prolog: the agent did not start for job $SLURM_JOB_ID (see $log)" >&2
exit 0  # the job runs without freeride rather than not at all
