#!/usr/bin/env python3
"""Merges the GPU check's part results into one JSON summary (printed as the LAST line of stdout)
and a Markdown table (stderr, and --md), with the date, GPU, driver and library versions on top,
ready to paste into the README. Needs no torch."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import read_json, write_json  # noqa: E402


def f(x, fmt="%.2f"):
    if x is None:
        return "n/a"
    try:
        return fmt % x
    except TypeError:
        return str(x)


def yn(b):
    return "n/a" if b is None else ("yes" if b else "**NO**")


def step_info(res, name):
    s = read_json(os.path.join(res, "step-%s.json" % name), {}) or {}
    return s


def part_status(res, step, data):
    st = step_info(res, step)
    if st.get("skipped"):
        return "skipped", st.get("why", "skipped")
    if data is None:
        return "failed", "no result (rc=%s%s): see %s.log" % (st.get("rc"), ", timed out" if st.get("rc") in (124, 137) else "", step)
    s = data.get("status", "ok")
    err = None
    if st.get("rc") not in (0, None):
        err = "rc=%s" % st.get("rc")
    return s, err


def compact(summary, full_path):
    def r(x, n=3):
        return round(x, n) if isinstance(x, float) else x
    P = summary["parts"]
    env = summary.get("env") or {}
    c = {"date": summary["date"], "gpu": env.get("gpu"), "driver": env.get("driver"), "torch": env.get("torch"),
         "targets": summary["targets"], "failed": summary["failed"], "elapsed_s": summary.get("elapsed_s"),
         "full_summary": full_path}
    cov = P.get("coverage") or {}
    c["coverage"] = {"status": cov.get("status"), "total": cov.get("total"),
                     "phases": {k: [v.get("profiler_kernels"), v.get("freeride_kernels"), r(v.get("seen_share"), 4),
                                    v.get("extra_launches")] for k, v in (cov.get("phases") or {}).items()},
                     "phase_fields": ["profiler", "freeride", "seen_share", "extra"],
                     "nccl_pass": (cov.get("nccl_events") or {}).get("pass")}
    h = P.get("hook_cost") or {}
    c["hook_cost"] = {"status": h.get("status"), "tiny_ns_per_launch": h.get("tiny_ns_per_launch"),
                      "launch_bench_ns": h.get("launch_bench_ns"),
                      "tiny_hook_ns": r(h.get("tiny_hook_ns"), 1), "step_ms": h.get("step_ms"),
                      "step_overhead_pct": r(h.get("step_overhead_pct")), "step_noise_pct": r(h.get("step_noise_pct"))}
    gp = read_json(os.path.join(os.path.dirname(full_path), "gate_probe.json")) or {}
    c["gate_probe"] = {"pass": gp.get("pass"),
                       "runs": [{k: r.get(k) for k in ("grant", "steps", "steps_per_s", "rc", "stuck")}
                                for r in gp.get("runs", [])]} if gp else None
    hb = read_json(os.path.join(os.path.dirname(full_path), "hook_bench.json")) or {}
    c["hook_bench"] = {k: hb.get(k) for k in ("overhead_ns_1_thread", "overhead_ns_2_threads",
                                               "overhead_ns_4_threads", "overhead_ns_one_lane", "clock",
                                               "dropped")} if hb else None
    for key in ("gating_default", "gating_mps"):
        g = P.get(key) or {}
        out = {"status": g.get("status")}
        cmpd = g.get("comparison") or {}
        for k, v in (g.get("configs") or {}).items():
            tr = v.get("trainer") or {}
            out[k] = {"status": v.get("status"),
                      "iter_p50_ms": r((tr.get("iter_ms") or {}).get("p50")),
                      "busy_p50_ms": r((tr.get("busy_ms") or {}).get("p50")),
                      "busy_p90_ms": r((tr.get("busy_ms") or {}).get("p90")),
                      "iter_slowdown_pct": r((cmpd.get(k) or {}).get("iter_ms_p50_slowdown_pct"), 2),
                      "busy_slowdown_pct": r((cmpd.get(k) or {}).get("busy_ms_p50_slowdown_pct"), 2),
                      "side_steps_per_s": r(v.get("side_steps_per_s"), 2),
                      "side_steps_per_s_after_first_step": r(v.get("side_steps_per_s_after_first_step"), 2),
                      "side_tflops": r(v.get("side_tflops"), 1),
                      "grants": (v.get("grants") or {}).get("grants_opened_in_window"),
                      "gate": v.get("gate"),
                      "error": (" ".join(v.get("errors") or [])[:200] or None)}
        c[key] = out
    c["sdk_task"] = (P.get("sdk_task") or {}).get("status")
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", required=True, help="folder with the parts' JSON files")
    ap.add_argument("--json", required=True, help="write the summary JSON here")
    ap.add_argument("--md", required=True, help="write the Markdown table here")
    ap.add_argument("--elapsed", type=float, default=None)
    args = ap.parse_args()
    R = args.results
    env = read_json(os.path.join(R, "env.json"), {}) or {}
    cov = read_json(os.path.join(R, "coverage.json"))
    hook = read_json(os.path.join(R, "hook_cost.json"))
    sdk = read_json(os.path.join(R, "sdk_probe.json"))
    gd = read_json(os.path.join(R, "gating_default.json"))
    gm = read_json(os.path.join(R, "gating_mps.json"))
    mps = read_json(os.path.join(R, "mps.json"), {}) or {}

    summary = {"check": "freeride scripts/gpu-check.sh", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
               "env": env, "elapsed_s": args.elapsed, "parts": {}, "targets": {}, "failed": []}
    P = summary["parts"]

    # 1. coverage
    s, err = part_status(R, "coverage", cov)
    P["coverage"] = {"status": s}
    if err:
        P["coverage"]["error"] = err
    if cov:
        P["coverage"].update({
            "total": cov.get("total"),
            "phases": {k: {kk: v.get(kk) for kk in ("profiler_kernels", "freeride_kernels", "seen_share",
                                                   "extra_launches", "by_path", "pass", "error")}
                       for k, v in (cov.get("phases") or {}).items()},
            "nccl_events": cov.get("nccl_events"),
            "trace": cov.get("trace"),
            "errors": cov.get("errors"),
            "pass": cov.get("pass"),
        })
        summary["targets"]["coverage_seen_ge_99pct"] = (cov.get("targets") or {}).get("seen_ge_99pct_every_path")
        summary["targets"]["coverage_none_twice"] = (cov.get("targets") or {}).get("none_twice")
        summary["targets"]["coverage_nccl_comm_events"] = (cov.get("targets") or {}).get("nccl_comm_events")
    # 2. hook cost
    s, err = part_status(R, "hook_cost", hook)
    P["hook_cost"] = {"status": s}
    if err:
        P["hook_cost"]["error"] = err
    if hook:
        P["hook_cost"].update({k: hook.get(k) for k in ("tiny_ns_per_launch", "tiny_hook_ns", "tiny_overhead_pct",
                                                        "step_ms", "step_overhead_pct", "step_noise_pct", "errors", "pass")})
        summary["targets"]["hook_cost_step_lt_0.5pct"] = hook.get("pass")
    # 3. gating
    for key, g, step in (("gating_default", gd, "gating_default"), ("gating_mps", gm, "gating_mps")):
        s, err = part_status(R, step, g)
        if key == "gating_mps" and g is None and mps.get("started") is False:
            s = "failed" if "failed" in str(mps.get("why")) else "skipped"
            err = "MPS not started: %s" % mps.get("why")
        P[key] = {"status": s}
        if err:
            P[key]["error"] = err
        if g:
            P[key].update({"configs": g.get("configs"), "comparison": g.get("comparison"), "calib": g.get("calib"),
                           "trainer_idle_share": g.get("trainer_idle_share"), "failed_configs": g.get("failed_configs"),
                           "agent_note": "gated_agent: the real `freeride agent` (bubbles inferred from the trainer's "
                                         "NCCL self-exchange); gated_standin: grants written by the trainer itself "
                                         "(Python stand-in); ungated: side task without freeride"})
    P["gating_mps"]["mps_daemon"] = mps
    ok = bool(sdk) and all(r.get("rc") == 0 and (r.get("summary") or {}).get("state") == "finished"
                           for r in sdk.values())
    P["sdk_task"] = {"status": "ok" if ok else ("skipped" if not sdk else "failed"),
                     "note": "the SDK's examples (cuBLAS GEMMs) and the package's PyTorch side task, "
                             "standalone, a few steps each on this GPU",
                     "runs": sdk}
    for k, v in P.items():
        if v.get("status") not in ("ok", "skipped"):
            summary["failed"].append(k)
    write_json(args.json, summary)

    # ------------------------------------------------------------------ Markdown
    L = []
    L.append("### GPU check: %s" % summary["date"])
    L.append("")
    L.append("GPU: %s; driver %s; PyTorch %s (CUDA %s, NCCL %s); Triton %s; %s" % (
        env.get("gpu", "?"), env.get("driver", "?"), env.get("torch", "?"), env.get("torch_cuda", "?"),
        env.get("nccl", "?"), env.get("triton", "?"), "elapsed %.0f s" % args.elapsed if args.elapsed else ""))
    L.append("")
    L.append("| part | what | result | target | met |")
    L.append("| --- | --- | --- | --- | --- |")
    if cov:
        for name, ph in (cov.get("phases") or {}).items():
            if "profiler_kernels" in ph:
                L.append("| 1 coverage | %s (%s) | profiler %d, freeride %d (%s); seen %s%%, extra %d | >= 99%%, 0 extra | %s |" % (
                    name, ph.get("expected_path"), ph["profiler_kernels"], ph["freeride_kernels"],
                    ", ".join("%s %d" % kv for kv in sorted((ph.get("by_path") or {}).items())),
                    f(100.0 * ph["seen_share"]), ph["extra_launches"], yn(ph.get("pass"))))
            else:
                L.append("| 1 coverage | %s | failed: %s | >= 99%% | **NO** |" % (name, str(ph.get("error", ""))[:120].replace("\n", " ")))
        t = cov.get("total") or {}
        L.append("| 1 coverage | total | profiler %s, freeride %s, seen %s%%, extra %s | >= 99%%, 0 extra | %s |" % (
            t.get("profiler_kernels"), t.get("freeride_kernels"), f(100.0 * t["seen_share"]) if t.get("seen_share") is not None else "n/a",
            t.get("extra_launches"), yn(cov.get("pass"))))
        n = cov.get("nccl_events") or {}
        L.append("| 1 coverage | NCCL events | comm %s, groups %s/%s, comm_begin %s, comm_end %s, GPU duration p50 %s µs, data ok %s | all ops and begin/end pairs | %s |" % (
            n.get("comm_ops_by_api"), n.get("outer_groups_ended"), n.get("groups_expected"), n.get("comm_begin"),
            n.get("comm_end"), f((n.get("group_gpu_duration_us") or {}).get("p50"), "%.1f"), n.get("data_ok"), yn(n.get("pass"))))
        tr = cov.get("trace") or {}
        L.append("| 1 coverage | trace health | dropped %s, invalid %s, process_exit dropped %s | 0 | %s |" % (
            tr.get("dropped_records"), tr.get("invalid_records"), tr.get("process_exit_dropped"),
            yn(not tr.get("dropped_records") and not tr.get("invalid_records"))))
    else:
        L.append("| 1 coverage | all | %s: %s | | %s |" % (P["coverage"]["status"], P["coverage"].get("error") or "",
                                                        "skipped" if P["coverage"]["status"] == "skipped" else "**NO**"))
    if hook and hook.get("tiny_ns_per_launch"):
        tn = hook["tiny_ns_per_launch"]
        L.append("| 2 hook cost | tiny launch (host ns/launch) | off %s, on %s: +%s ns (%s%%) | tens of ns | |" % (
            f(tn.get("off"), "%.0f"), f(tn.get("on"), "%.0f"), f(hook.get("tiny_hook_ns"), "%.0f"), f(hook.get("tiny_overhead_pct"))))
        sm = hook.get("step_ms") or {}
        L.append("| 2 hook cost | transformer block step (ms) | off %s, on %s: %s%% (noise %s%%) | < 0.5%% | %s |" % (
            f(sm.get("off"), "%.3f"), f(sm.get("on"), "%.3f"), f(hook.get("step_overhead_pct"), "%.3f"),
            f(hook.get("step_noise_pct"), "%.2f"), yn(hook.get("pass"))))
    else:
        L.append("| 2 hook cost | all | %s: %s | < 0.5%% | %s |" % (
            P["hook_cost"]["status"], P["hook_cost"].get("error") or "", "skipped" if P["hook_cost"]["status"] == "skipped" else "**NO**"))
    for key, label in (("gating_default", "3 gating"), ("gating_mps", "3 gating, MPS")):
        g = P.get(key) or {}
        cfgs = g.get("configs") or {}
        if not cfgs:
            L.append("| %s | all | %s: %s | | %s |" % (label, g.get("status"), g.get("error") or "",
                                                    "skipped" if g.get("status") == "skipped" else "**NO**"))
            continue
        cmpd = g.get("comparison") or {}
        for k, c in cfgs.items():
            if c.get("status") != "ok":
                ev = ("; EVICTED %d: %s" % (len(c["evictions"]), c["evictions"][0][-200:])) if c.get("evictions") else ""
                L.append("| %s | %s | %s: %s%s | | **NO** |" % (label, k, c.get("status"), " ".join(c.get("errors") or [])[:160].replace("\n", " ").replace("|", "/"), ev.replace("|", "/")))
                continue
            parts = []
            tr = c.get("trainer")
            if tr:
                parts.append("iteration p50/p90 %s/%s ms, busy p50/p90 %s/%s ms, gap p50 %s ms" % (
                    f(tr["iter_ms"].get("p50")), f(tr["iter_ms"].get("p90")), f(tr["busy_ms"].get("p50")),
                    f(tr["busy_ms"].get("p90")), f(tr["gap_ms"].get("p50"))))
            cm = cmpd.get(k) or {}
            if "iter_ms_p50_slowdown_pct" in cm:
                parts.append("slowdown iter %s%% busy %s%%" % (f(cm.get("iter_ms_p50_slowdown_pct"), "%+.1f"),
                                                                 f(cm.get("busy_ms_p50_slowdown_pct"), "%+.1f")))
            if c.get("side_steps_per_s") is not None:
                parts.append("side task %s steps/s, %s TFLOP/s%s" % (
                    f(c["side_steps_per_s"], "%.1f"), f(c.get("side_tflops"), "%.0f"),
                    (", %s%% of alone" % f(100 * cm["side_throughput_vs_alone"], "%.0f")) if "side_throughput_vs_alone" in cm else ""))
                if c.get("side_steps_per_s_after_first_step") is not None and k != "side_alone":
                    parts.append("after its first step %s steps/s" % f(c["side_steps_per_s_after_first_step"], "%.1f"))
            gr = c.get("grants")
            if gr and k != "side_alone":
                parts.append("grants %s (open %s%%)" % (gr.get("grants_opened_in_window"), f(100 * (gr.get("grant_open_share") or 0), "%.0f")))
            for gt in c.get("gate") or []:
                parts.append("gate held %d/%d, starved %d" % (gt["held"], gt["admitted"], gt["starved"]))
            ag = c.get("agent_status") or {}
            for gpu in ag.get("gpus") or []:
                parts.append("agent: %s bubbles, share %s%%" % (gpu.get("bubbles"), f(100 * (gpu.get("bubble_share") or 0), "%.0f")))
            if c.get("evictions"):
                parts.append("EVICTED %d: %s" % (len(c["evictions"]), c["evictions"][0][-200:]))
            target = ""
            met = ""
            if k == "gated_agent" or k == "gated_standin":
                target = "iteration +<= 1%"
                v = cm.get("iter_ms_p50_slowdown_pct")
                met = yn(v is not None and v <= 1.0) if v is not None else "n/a"
            L.append("| %s | %s (%s) | %s | %s | %s |" % (label, k, c.get("agent"), "; ".join(parts).replace("|", "/"), target, met))
    if mps:
        L.append("| 3 gating, MPS | daemon | started %s, stopped %s | | |" % (mps.get("started"), mps.get("stopped")))
    sdk_txt = "; ".join("%s rc=%s %s" % (k, r.get("rc"), (r.get("summary") or {}).get("state"))
                        for k, r in (sdk or {}).items()) or "not run"
    L.append("| SDK side tasks | examples + PyTorch | %s | | |" % sdk_txt.replace("|", "/"))
    L.append("")
    if summary["failed"]:
        L.append("Failed parts: %s" % ", ".join(summary["failed"]))
        L.append("")
    md = "\n".join(L) + "\n"
    with open(args.md, "w") as fh:
        fh.write(md)
    sys.stderr.write(md)
    sys.stderr.flush()
    # compact JSON (key numbers; the full one is --json): the last line of stdout
    sys.stdout.write(json.dumps(compact(summary, args.json), sort_keys=True, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
