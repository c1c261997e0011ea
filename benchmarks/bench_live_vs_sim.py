#!/usr/bin/env python3
"""Live controller vs its own simulator on the same workload (prints figures; no thresholds).

Runs a 30-job workload of checkpointing sleep jobs (the demo's job script:
it needs WORK seconds of service, checkpoints on USR1 and resumes) on a
local Slurm cluster of 4 nodes x 4 GPUs under the live controller, then
replays the same jobs (same arrival offsets, same service) in the simulator
under the same policy and queues, charged the per-run cost measured live
(slurm_plugin/controller/demo.py: run_overhead). Prints both average JCTs,
and where the live seconds went, from the audit log's per-job timeline
(docs/controller.md "Timeline"): waiting for a decision, the controller's
enactment, Slurm's start latency, the checkpoint and the requeue round trip.

    .venv/bin/python benchmarks/bench_live_vs_sim.py [--jobs 30] [--queues 60] [--poll 1]
        [--no-events] [--dir /var/tmp/tt-live] [--port-base 18040] [--runs 3] [--json]

The cluster is started if it is not up (and left up). Takes the workload's
makespan (~3-4 minutes at 30 jobs) plus a few seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without install

import yaml  # noqa: E402

from slurm_plugin.backends.cli import CliBackend  # noqa: E402
from slurm_plugin.config import load_config  # noqa: E402
from slurm_plugin.controller.accounting import total_executed  # noqa: E402
from slurm_plugin.controller.audit import read_audit, timelines  # noqa: E402
from slurm_plugin.controller.demo import DemoJob, demo_cluster, run_overhead, simulate, submit_demo_job  # noqa: E402
from slurm_plugin.controller.runtime import make_controller  # noqa: E402
from slurm_plugin.controller.state import StateStore  # noqa: E402
from slurm_plugin.localcluster import ClusterConfig, LocalCluster  # noqa: E402

LUA = Path(__file__).resolve().parent.parent / "etc" / "job_submit.lua"


def workload(n: int, seed: int = 1) -> list[DemoJob]:
    """``n`` jobs arriving over the first minute: mostly short 1-2 GPU jobs, some
    long 4-8 GPU ones (the mix where 2D-LAS beats FIFO), 16 GPUs kept busy."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        gpus = rng.choice([1, 1, 1, 2, 2, 4, 4, 8])
        work = float(rng.choice([5, 8, 10, 15, 20]) if rng.random() < 0.7 else rng.choice([40, 60, 80]))
        offset = round(rng.uniform(0, 60), 1) if i else 0.0
        jobs.append(DemoJob(i, offset, gpus, work, "long" if gpus * work >= 300 else "short"))
    return sorted(jobs, key=lambda j: j.offset)


def breakdown(tl: list[tuple[str, float, int]]) -> dict[str, float]:
    """Seconds of one job's life by stage pair (audit.STAGES), summed over its runs.
    Slurm's stamps are whole seconds, so each pair is clamped at 0."""
    out = {
        "wait_for_decision": 0.0,
        "enact": 0.0,
        "slurm_start": 0.0,
        "running": 0.0,
        "checkpoint": 0.0,
        "requeue": 0.0,
    }
    runs: dict[int, dict[str, float]] = {}
    for stage, at, run in tl:
        runs.setdefault(run, {})[stage] = at
    ready = runs.get(0, {}).get("submitted")
    for run in sorted(runs):
        st = runs[run]
        if "decided" in st and ready is not None:
            out["wait_for_decision"] += max(st["decided"] - ready, 0.0)
        if "decided" in st and "released" in st:
            out["enact"] += max(st["released"] - st["decided"], 0.0)
        if "released" in st and "started" in st:
            out["slurm_start"] += max(st["started"] - st["released"], 0.0)
        end = st.get("signalled", st.get("finished"))
        if "started" in st and end is not None:
            out["running"] += max(end - st["started"], 0.0)
        if "signalled" in st and "acked" in st:
            out["checkpoint"] += max(st["acked"] - st["signalled"], 0.0)
        if "signalled" in st and "requeued" in st:
            out["requeue"] += max(st["requeued"] - st.get("acked", st["signalled"]), 0.0)
        ready = st.get("requeued", ready)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--queues", type=float, nargs="+", default=[60.0], help="LAS thresholds, GPU-s")
    ap.add_argument("--policy", default="las")
    ap.add_argument("--poll", type=float, default=1.0, help="poll interval, s")
    ap.add_argument("--no-events", action="store_true", help="polling only (no events socket)")
    ap.add_argument("--dir", default="/var/tmp/tt-live")
    ap.add_argument("--port-base", type=int, default=18040)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--runs",
        type=int,
        default=1,
        help="repeat the workload N times and print the mean gap (live JCT spreads by"
        " several seconds from run to run: decisions fork on sub-second timing)",
    )
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs: give 1 or more")

    d = Path(a.dir)
    cluster = LocalCluster(
        ClusterConfig(dir=d, port_base=a.port_base, job_submit_lua=LUA, events=not a.no_events), log=lambda m: None
    )
    cluster.up()
    reports = []
    for i in range(a.runs):
        report = run_once(a, cluster)
        if report is None:
            return 1
        reports.append(report)
        if not a.json:
            say(a, report, f"run {i + 1}/{a.runs}: " if a.runs > 1 else "")
    if a.runs == 1:
        if a.json:
            print(json.dumps(reports[0], indent=1))
        return 0
    gaps = [r["gap_pct"] for r in reports]
    summary = {
        "runs": reports,
        "mean_avg_jct_live_s": round(statistics.fmean(r["avg_jct_live_s"] for r in reports), 1),
        "mean_avg_jct_sim_s": round(statistics.fmean(r["avg_jct_sim_s"] for r in reports), 1),
        "mean_gap_pct": round(statistics.fmean(gaps), 1),
        "gap_pct_range": [min(gaps), max(gaps)],
    }
    if a.json:
        print(json.dumps(summary, indent=1))
    else:
        print(
            f"{a.runs} runs: mean avg JCT live {summary['mean_avg_jct_live_s']} s, simulated "
            f"{summary['mean_avg_jct_sim_s']} s, mean gap {summary['mean_gap_pct']:+.1f}% "
            f"(runs {min(gaps):+.1f}% to {max(gaps):+.1f}%)"
        )
    return 0


def run_once(a: argparse.Namespace, cluster: LocalCluster) -> dict[str, Any] | None:
    """One live run of the workload and its simulated replay; None when it did not finish."""
    cluster.cancel_all_jobs()
    work = Path("/tmp") / f"bench-live-{int(time.time())}"
    (work / "jobs").mkdir(parents=True)
    (work / "jobs").chmod(0o777)
    cfg_data: dict[str, Any] = {
        "partitions": ["gpu"],
        "policy": {"name": a.policy, "queues": a.queues},
        "placement": "consolidate",
        "poll_interval": a.poll,
        # min_run_seconds 0: the paper's rule, as in the simulator it is compared with.
        "preemption": {"grace_seconds": 10, "start_timeout_seconds": 20, "min_run_seconds": 0},
        "state_db": str(work / "state.db"),
        "audit_log": str(work / "audit.jsonl"),
        "backend": "cli",
        "slurm_conf": str(cluster.cfg.conf),
    }
    if not a.no_events:
        cfg_data["events"] = {"socket": str(cluster.cfg.events_socket)}
    (work / "teiresias.yaml").write_text(yaml.safe_dump(cfg_data))
    cfg = load_config(work / "teiresias.yaml")
    logging.basicConfig(filename=str(work / "controller.log"), level=logging.INFO)
    backend = CliBackend(slurm_conf=cluster.cfg.conf)
    ctl = make_controller(cfg, backend=backend)
    stop = threading.Event()
    worker = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    worker.start()

    jobs = workload(a.jobs)
    base = work / "jobs"
    ids: dict[int, int] = {}
    t0 = time.time()
    try:
        while True:
            el = time.time() - t0
            for j in jobs:
                if j.index not in ids and el >= j.offset:
                    ids[j.index] = submit_demo_job(backend, j, base, f"b{j.index:02d}")
            if len(ids) == len(jobs):
                store = StateStore(cfg.state_db, readonly_copy=True)
                recs = store.jobs(active_only=False)
                store.close()
                if all(i in recs and not recs[i].active for i in ids.values()):
                    break
            if el > a.timeout or not worker.is_alive():
                print(f"not finished after {el:.0f}s; see {work}/controller.log", file=sys.stderr)
                return None
            time.sleep(0.5)
    finally:
        stop.set()
        worker.join(30)
        ctl.store.close()
        ctl.audit.close()
        cluster.cancel_all_jobs()

    now = time.time()
    overhead = run_overhead(
        [(total_executed(recs[ids[j.index]], now), j.work, 1 + recs[ids[j.index]].preemptions) for j in jobs]
    )
    sim = simulate(
        jobs,
        demo_cluster(cluster.cfg.node_names, cluster.cfg.gpus_per_node),
        a.policy,
        tuple(a.queues),
        a.poll,
        overhead,
    )
    live = {j.index: (recs[ids[j.index]].end_time or 0.0) - recs[ids[j.index]].submit_time for j in jobs}
    tls = timelines(read_audit(work / "audit.jsonl"))
    parts = [breakdown(tls.get(ids[j.index], [])) for j in jobs]
    avg_live = statistics.fmean(live.values())
    report = {
        "jobs": len(jobs),
        "policy": a.policy,
        "queues": a.queues,
        "poll_s": a.poll,
        "events": not a.no_events,
        "avg_jct_live_s": round(avg_live, 1),
        "avg_jct_sim_s": round(sim.avg, 1),
        "gap_pct": round(100 * (avg_live - sim.avg) / sim.avg, 1),
        "run_overhead_s": round(overhead, 2),
        "preemptions_live": sum(recs[i].preemptions for i in ids.values()),
        "all_completed": all(recs[i].final_state == "COMPLETED" for i in ids.values()),
        "per_job_avg_s": {k: round(statistics.fmean(p[k] for p in parts), 2) for k in parts[0]},
        "work_dir": str(work),
    }
    return report


def say(a: argparse.Namespace, report: dict[str, Any], prefix: str) -> None:
    print(
        f"{prefix}{report['jobs']} jobs, {a.policy} queues {a.queues} GPU-s, poll {a.poll:g}s, "
        f"events {'on' if report['events'] else 'off'}: avg JCT live {report['avg_jct_live_s']} s, "
        f"simulated {report['avg_jct_sim_s']} s ({report['gap_pct']:+.1f}%), "
        f"{report['preemptions_live']} preemptions, per-run cost {report['run_overhead_s']} s"
    )
    print("per job, average seconds: " + ", ".join(f"{k} {v}" for k, v in report["per_job_avg_s"].items()))


if __name__ == "__main__":
    sys.exit(main())
