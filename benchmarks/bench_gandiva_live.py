"""Gandiva's mechanisms on the real local Slurm: what they cost (docs/gandiva.md, "Measured costs").

Real ``tsbatch`` PyTorch jobs (a small MLP on CPU, one thread, the hooks on)
on a local cluster of 2 nodes x 1 fake GPU x 2 shards (its own directory and
ports). The bench plays the controller's part with the same backend calls.

(a) Time-slicing by shared allocation: two ``--gres=shard:1`` jobs on node1's
    one GPU, round-robin with ``scontrol suspend/resume`` every SLICE seconds.
(b) Time-slicing by checkpoint/requeue rounds: two ``--gres=gpu:1`` jobs on
    node1, one held; each round preempts the runner (USR1, Ack, requeue held)
    and releases the other.
(c) Migration: one ``--gres=gpu:1`` job moved node1 -> node2 -> node1 ...
    (checkpoint, requeue held, pin the node list, release, resume).

Per slice (a, b): the switch latency (switch call -> the incoming job's first
finished step), the step-time overhead (switch latency minus one median step:
time the GPU is not training), and the fraction of slices in which a job made
no step at all (lost slices). Per migration (c): signal -> Ack, Ack -> running
again, signal -> first step on the new node. Each job prints ``step N T``
(T = time.time() after the step), which the bench reads from its output.

(d) Live vs simulated (``--only livesim``, not in the default run): the real
    controller under policy gandiva on multi-GPU nodes (``--nodes``, ``--gpus``,
    per-GPU shard types), twice as many 1-GPU shard jobs as GPUs (checkpointing
    sleep jobs, slurm_plugin/controller/demo.py's), half at the start and half
    arriving over the first 20 s; then the same jobs in the simulator under the
    same policy, charged the per-run cost and the migration cost measured live.
    Prints both average JCTs and the gap, and checks the plan's GPUs: every
    job bound to one GPU ran on its own IDX, no two of them on one GPU.

Usage (as root; about 3 minutes with the defaults):
  .venv/bin/python benchmarks/bench_gandiva_live.py
  .venv/bin/python benchmarks/bench_gandiva_live.py --slice 4 --slices 8 --migrations 3 --json
  .venv/bin/python benchmarks/bench_gandiva_live.py --only livesim --nodes 2 --gpus 4 --runs 3
Environment: TEIRESIAS_BENCH_CLUSTER_DIR, TEIRESIAS_BENCH_CLUSTER_PORT_BASE
(default /var/tmp/teiresias-bench-gandiva, 17260).
Add --only migration (or suspend, requeue) to run one part.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurm_plugin.backends.base import requeue_settle_wait
from slurm_plugin.backends.cli import CliBackend
from slurm_plugin.controller.demo import DemoJob
from slurm_plugin.localcluster import ClusterConfig, LocalCluster, client_env
from teiresias import jobfiles as protocol

TSBATCH = str(Path(sys.executable).with_name("tsbatch"))

TRAIN = """\
import sys, time, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
torch.manual_seed(0)
x = torch.randn(64 * 64, 128)
loader = DataLoader(TensorDataset(x, x[:, :1]), batch_size=64, shuffle=True,
                    generator=torch.Generator().manual_seed(0))
model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
n = 0
for epoch in range(100000):
    for xb, yb in loader:
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        n = int(opt.state[next(iter(model.parameters()))]["step"])
        print(f"step {n} {time.time():.6f}", flush=True)
"""


def poll(what: str, check: Callable[[], object], timeout: float = 120, every: float = 0.05) -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_gandiva_live: timed out waiting for {what}")
        time.sleep(every)


@dataclass
class Bench:
    backend: CliBackend
    env: dict[str, str]
    work: Path

    def submit(self, name: str, *args: str) -> int:
        script = self.work / "train.py"
        script.write_text(TRAIN)
        r = subprocess.run(
            [
                TSBATCH,
                f"--checkpoint-dir={self.work / 'ckpt'}",
                "-J",
                name,
                "-c",
                "1",
                "-t",
                "30",
                f"--output={self.work}/%j.out",
                *args,
                "--wrap",
                f"{sys.executable} {script}",
            ],
            env={**self.env, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if r.returncode != 0:
            raise SystemExit(f"bench_gandiva_live: tsbatch failed: {r.stderr.strip()}")
        return int(r.stdout.split()[-1])

    def steps(self, job: int) -> list[tuple[int, float]]:
        try:
            text = (self.work / f"{job}.out").read_text()
        except OSError:
            return []
        return [(int(m.group(1)), float(m.group(2))) for m in re.finditer(r"^step (\d+) ([\d.]+)$", text, re.M)]

    def first_step_after(self, job: int, t: float, timeout: float = 120) -> float:
        got = poll(
            f"job {job}'s first step after {t:.1f}",
            lambda: next((s for _, s in self.steps(job) if s > t), None),
            timeout,
        )
        return float(got)  # type: ignore[arg-type]

    def median_step(self, job: int) -> float:
        ts = [s for _, s in self.steps(job)]
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        return statistics.median(gaps) if gaps else float("nan")

    def jobdir(self, job: int) -> Path:
        return protocol.job_dir(self.work / "ckpt", job)

    def state(self, job: int) -> str:
        return self.backend.job(job).state

    def preempt(self, job: int) -> tuple[float, float]:
        """Two-phase preemption as the controller does it; returns (signal time, Ack time)."""
        protocol.ack_path(self.jobdir(job)).unlink(missing_ok=True)
        restart = self.backend.job(job).restart_count
        t0 = time.time()
        self.backend.signal(job, protocol.PREEMPT_SIGNAL)
        poll(
            f"job {job}'s Ack",
            lambda: (a := protocol.read_ack(self.jobdir(job))) is not None and a.restart_count == restart,
        )
        t_ack = time.time()
        self.backend.requeue(job, hold=True)
        return t0, t_ack

    def start(self, job: int, nodes: tuple[str, ...]) -> None:
        """Release a held (maybe requeued) job on ``nodes``, after the settle wait."""
        sj = self.backend.job(job)
        wait = requeue_settle_wait(sj, time.time())
        if wait > 0:
            time.sleep(wait)
        self.backend.set_nodelist(job, nodes)
        if sj.restart_count:
            self.backend.clear_begin_time(job)
        self.backend.release(job)
        if sj.restart_count:
            # starttime=now is ignored while the previous run is still COMPLETING
            # (../shared/notes/gpu-sharing-on-slurm.md §6): clear it again until it holds.
            def running() -> bool:
                now = self.backend.job(job)
                if now.state == "PENDING" and now.state_reason == "BeginTime":
                    self.backend.clear_begin_time(job)
                return now.state == "RUNNING"

            poll(f"job {job} running again", running, timeout=60, every=0.2)


def bench_suspend(b: Bench, slice_s: float, slices: int) -> dict[str, object]:
    jobs = [b.submit(f"slice{k}", "--gres=shard:1", "-w", "node1") for k in range(2)]
    for j in jobs:
        poll(f"job {j} training", lambda j=j: len(b.steps(j)) >= 5)
    b.backend.suspend(jobs[1])
    poll("the first job suspended", lambda: b.state(jobs[1]) == "SUSPENDED")
    runner, waiting = 0, 1
    switch: list[float] = []
    suspend_cmd: list[float] = []
    marks: list[tuple[int, float, float]] = []  # (job, resumed at, suspended at)
    t_resumed = time.time()
    for _ in range(slices):
        time.sleep(max(0.0, t_resumed + slice_s - time.time()))
        t0 = time.time()
        b.backend.suspend(jobs[runner])
        t1 = time.time()
        b.backend.resume(jobs[waiting])
        suspend_cmd.append(t1 - t0)
        marks.append((jobs[runner], t_resumed, t0))
        first = b.first_step_after(jobs[waiting], t1)
        switch.append(first - t0)
        runner, waiting, t_resumed = waiting, runner, t1
    time.sleep(max(0.0, t_resumed + slice_s - time.time()))
    marks.append((jobs[runner], t_resumed, time.time()))
    median = statistics.median([b.median_step(j) for j in jobs])
    lost = sum(1 for j, a, z in marks if not any(a < s <= z for _, s in b.steps(j)))
    parked = [r.parked - r.signalled for j in jobs for r in protocol.read_slices(b.jobdir(j)) if r.parked]
    for j in jobs:
        if b.state(j) == "SUSPENDED":
            b.backend.resume(j)
        b.backend.cancel(j)
    return {
        "slice_s": slice_s,
        "slices": len(marks),
        "median_step_s": round(median, 4),
        "switch_s_median": round(statistics.median(switch), 3),
        "switch_s_max": round(max(switch), 3),
        "overhead_per_slice_s": round(statistics.median(switch) - median, 3),
        "overhead_fraction": round((statistics.median(switch) - median) / slice_s, 4),
        "park_s_median": round(statistics.median(parked), 4) if parked else None,
        "scontrol_suspend_s": round(statistics.median(suspend_cmd), 3),
        "lost_slices": lost,
        "lost_fraction": round(lost / len(marks), 3),
    }


def bench_requeue(b: Bench, slice_s: float, slices: int) -> dict[str, object]:
    jobs = [b.submit(f"round{k}", "--gres=gpu:1", "-H") for k in range(2)]
    b.start(jobs[0], ("node1",))
    poll("the first job training", lambda: len(b.steps(jobs[0])) >= 5)
    runner, waiting = 0, 1
    switch: list[float] = []
    ckpt: list[float] = []
    marks: list[tuple[int, float, float]] = []
    t_started = time.time()
    for _ in range(slices):
        time.sleep(max(0.0, t_started + slice_s - time.time()))
        t0, t_ack = b.preempt(jobs[runner])
        ckpt.append(t_ack - t0)
        marks.append((jobs[runner], t_started, t0))
        b.start(jobs[waiting], ("node1",))
        first = b.first_step_after(jobs[waiting], t0)
        switch.append(first - t0)
        runner, waiting, t_started = waiting, runner, time.time()
    time.sleep(max(0.0, t_started + slice_s - time.time()))
    marks.append((jobs[runner], t_started, time.time()))
    median = statistics.median([b.median_step(j) for j in jobs])
    lost = sum(1 for j, a, z in marks if not any(a < s <= z for _, s in b.steps(j)))
    for j in jobs:
        b.backend.cancel(j)
    return {
        "slice_s": slice_s,
        "slices": len(marks),
        "median_step_s": round(median, 4),
        "checkpoint_ack_s_median": round(statistics.median(ckpt), 3),
        "switch_s_median": round(statistics.median(switch), 3),
        "switch_s_max": round(max(switch), 3),
        "overhead_per_slice_s": round(statistics.median(switch) - median, 3),
        "overhead_fraction": round((statistics.median(switch) - median) / slice_s, 4),
        "lost_slices": lost,
        "lost_fraction": round(lost / len(marks), 3),
    }


def bench_migrate(b: Bench, migrations: int) -> dict[str, object]:
    job = b.submit("migrate", "--gres=gpu:1", "-H")
    b.start(job, ("node1",))
    poll("the job training", lambda: len(b.steps(job)) >= 5)
    rows = []
    node = "node1"
    for _ in range(migrations):
        node = "node2" if node == "node1" else "node1"
        t0, t_ack = b.preempt(job)
        b.start(job, (node,))
        poll(
            f"running on {node}",
            lambda node=node: (sj := b.backend.job(job)).state == "RUNNING" and node in sj.nodes,
            timeout=60,
        )
        t_run = time.time()
        first = b.first_step_after(job, t_ack)
        rows.append((t_ack - t0, t_run - t_ack, first - t0))
        time.sleep(1.0)  # a few steps on the new node before the next move
    b.backend.cancel(job)
    return {
        "migrations": len(rows),
        "checkpoint_ack_s_median": round(statistics.median(r[0] for r in rows), 3),
        "requeue_to_running_s_median": round(statistics.median(r[1] for r in rows), 3),
        "signal_to_first_step_s_median": round(statistics.median(r[2] for r in rows), 3),
        "signal_to_first_step_s_max": round(max(r[2] for r in rows), 3),
    }


def _livesim_workload(gpus: int, seed: int) -> list[DemoJob]:
    """2 x ``gpus`` 1-GPU jobs: ``gpus`` at t=0, the rest over the first 20 s; 30-90 s of work."""
    rng = random.Random(seed)
    jobs = []
    for i in range(2 * gpus):
        offset = 0.0 if i < gpus else round(rng.uniform(2, 20), 1)
        jobs.append(DemoJob(i, offset, 1, float(rng.choice([30, 45, 60, 90])), "short"))
    return sorted(jobs, key=lambda j: (j.offset, j.index))


def _run_cost(audit: list[dict], tls: dict[int, list[tuple[str, float, int]]], work: dict[int, float]) -> float:
    """Seconds a run costs beyond its work, pooled over the jobs: Slurm's start (released ->
    started) plus the time it ran, not suspended, beyond its work (start-up, the switches).
    Unlike demo.run_overhead it leaves out the suspended time, which the controller counts
    as executed (a sliced job's service grows with wall time, docs/gandiva.md)."""
    suspended: dict[int, float] = {}
    since: dict[int, float] = {}
    for e in audit:
        if e["action"] == "suspend":
            since[e["job"]] = e["time"]
        elif e["action"] in ("resume", "finished", "migrate") and e["job"] in since:
            suspended[e["job"]] = suspended.get(e["job"], 0.0) + e["time"] - since.pop(e["job"])
    excess, runs = 0.0, 0
    for job, need in work.items():
        st: dict[int, dict[str, float]] = {}
        for stage, at, run_ in tls.get(job, []):
            st.setdefault(run_, {})[stage] = at
        ran = 0.0
        for r in st.values():
            end = r.get("signalled", r.get("finished"))
            if "started" in r and end is not None:
                ran += end - r["started"]
            if "released" in r and "started" in r:
                excess += max(r["started"] - r["released"], 0.0)
            runs += 1
        excess += ran - suspended.get(job, 0.0) - need
    return max(excess / runs, 0.0) if runs else 0.0


def bench_livesim(a: argparse.Namespace, cluster: LocalCluster, seed: int) -> dict[str, object]:
    """One live run of the workload under the controller and its simulated replay."""
    import logging
    import threading

    import yaml

    from slurm_plugin.config import load_config
    from slurm_plugin.controller.audit import read_audit, timelines
    from slurm_plugin.controller.demo import demo_cluster, submit_demo_job
    from slurm_plugin.controller.runtime import make_controller
    from slurm_plugin.controller.state import StateStore
    from teiresias.policy.gandiva import GandivaParams
    from teiresias.policy.registry import PolicyParams, build_policy
    from teiresias.simulator import SimulationOptions, TraceJob, run

    cluster.cancel_all_jobs()
    work = Path("/var/tmp") / f"bench-gandiva-livesim-{int(time.time())}"
    (work / "jobs").mkdir(parents=True)
    (work / "jobs").chmod(0o777)
    params = {"slice": a.slice, "max_height": 2, "packing": False, "migration": True, "grow_shrink": False}
    cfg_data = {
        "partitions": ["gpu"],
        "policy": {"name": "gandiva", "gandiva": params},
        "placement": "consolidate",
        "poll_interval": 1.0,
        "preemption": {"grace_seconds": 10, "start_timeout_seconds": 30},
        "state_db": str(work / "state.db"),
        "audit_log": str(work / "audit.jsonl"),
        "backend": "cli",
        "slurm_conf": str(cluster.cfg.conf),
    }
    (work / "teiresias.yaml").write_text(yaml.safe_dump(cfg_data))
    cfg = load_config(work / "teiresias.yaml")
    logging.basicConfig(filename=str(work / "controller.log"), level=logging.INFO)
    backend = CliBackend(slurm_conf=cluster.cfg.conf)
    ctl = make_controller(cfg, backend=backend)
    stop = threading.Event()
    worker = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    worker.start()
    gpus = cluster.cfg.nodes * cluster.cfg.gpus_per_node
    jobs = _livesim_workload(gpus, seed)
    base = work / "jobs"
    ids: dict[int, int] = {}
    seen_idx: dict[int, set[tuple[str, tuple[int, ...]]]] = {}
    overlaps = 0
    t0 = time.time()
    try:
        while True:
            el = time.time() - t0
            for j in jobs:
                if j.index not in ids and el >= j.offset:
                    ids[j.index] = submit_demo_job(backend, j, base, f"g{j.index:02d}", gres="shard:1")
            # The plan's GPUs: jobs bound to one GPU hold exactly it (Slurm's IDX), one job each.
            running = [sj for sj in backend.jobs() if sj.state == "RUNNING" and len(sj.shard_gpus) == 1]
            held: dict[tuple[str, int], int] = {}
            for sj in running:
                for node, idx in sj.gpu_ids:
                    seen_idx.setdefault(sj.job_id, set()).add((node, idx))
                    for i in idx:
                        held[(node, i)] = held.get((node, i), 0) + 1
            overlaps += sum(1 for n in held.values() if n > 1)
            if len(ids) == len(jobs):
                store = StateStore(cfg.state_db, readonly_copy=True)
                recs = store.jobs(active_only=False)
                store.close()
                if all(i in recs and not recs[i].active for i in ids.values()):
                    break
            if el > a.timeout or not worker.is_alive():
                raise SystemExit(f"bench_gandiva_live: not finished after {el:.0f}s; see {work}/controller.log")
            time.sleep(0.5)
    finally:
        stop.set()
        worker.join(30)
        ctl.store.close()
        ctl.audit.close()
        cluster.cancel_all_jobs()
    audit = read_audit(work / "audit.jsonl")
    tls = timelines(audit)
    overhead = _run_cost(audit, tls, {ids[j.index]: j.work for j in jobs})
    moves = []
    for e in audit:
        if e["action"] != "migrate":
            continue
        st = {(stage, run): at for stage, at, run in tls.get(e["job"], [])}
        runs = sorted({run for _, run in st})
        for run_ in runs[1:]:
            if ("started", run_) in st and ("signalled", run_ - 1) in st:
                moves.append(st[("started", run_)] - st[("signalled", run_ - 1)])
    migration_cost = statistics.fmean(moves) + overhead if moves else overhead
    trace = [TraceJob(job_id=j.index + 1, num_gpus=1, submit_time=j.offset, duration=j.work + overhead) for j in jobs]
    sim = run(
        trace,
        demo_cluster(cluster.cfg.node_names, cluster.cfg.gpus_per_node),
        build_policy("gandiva", PolicyParams(placement="consolidate", gandiva=GandivaParams(**params))),
        SimulationOptions(interval=1.0, progress=False, record_timeline=False, migration_cost=migration_cost),
    )
    sim_jct = {r.job_id - 1: r.jct for r in sim.records}
    live = {j.index: (recs[ids[j.index]].end_time or 0.0) - recs[ids[j.index]].submit_time for j in jobs}
    avg_live, avg_sim = statistics.fmean(live.values()), statistics.fmean(sim_jct.values())
    actions = [e["action"] for e in audit]
    return {
        "nodes": cluster.cfg.nodes,
        "gpus_per_node": cluster.cfg.gpus_per_node,
        "jobs": len(jobs),
        "slice_s": a.slice,
        "avg_jct_live_s": round(avg_live, 1),
        "avg_jct_sim_s": round(avg_sim, 1),
        "gap_pct": round(100 * (avg_live - avg_sim) / avg_sim, 1),
        "run_overhead_s": round(overhead, 2),
        "migration_cost_s": round(migration_cost, 2),
        "live": {k: actions.count(k) for k in ("suspend", "resume", "device", "migrate")},
        "sim": {"suspensions": sim.summary.suspensions, "migrations": sim.summary.migrations},
        "gpu_overlaps_seen": overlaps,
        "all_completed": all(recs[i].final_state == "COMPLETED" for i in ids.values()),
        "work_dir": str(work),
    }


def main_livesim(a: argparse.Namespace) -> None:
    cfg = ClusterConfig(
        dir=Path(os.environ.get("TEIRESIAS_BENCH_CLUSTER_DIR", "/var/tmp/teiresias-bench-gandiva") + "-livesim"),
        nodes=a.nodes,
        gpus_per_node=a.gpus,
        cpus_per_node=max(8, 2 * a.gpus + 2),
        shards_per_gpu=a.gpus + 2,  # one per job bound to the GPU, one per job bound to all the node's
        port_base=int(os.environ.get("TEIRESIAS_BENCH_CLUSTER_PORT_BASE", "17260")) + 20,
        partitions=("gpu",),
        job_submit_lua=Path(__file__).resolve().parent.parent / "etc" / "job_submit.lua",
    )
    cluster = LocalCluster(cfg)
    cluster.up()
    rows = []
    try:
        for i in range(a.runs):
            row = bench_livesim(a, cluster, seed=1 + i)
            rows.append(row)
            if not a.json:
                print(
                    f"run {i + 1}/{a.runs}: {row['nodes']} x {row['gpus_per_node']} GPUs, {row['jobs']} jobs,"
                    f" slice {row['slice_s']:g} s: avg JCT live {row['avg_jct_live_s']} s, simulated"
                    f" {row['avg_jct_sim_s']} s ({row['gap_pct']:+.1f}%); live {row['live']}, sim {row['sim']},"
                    f" GPU overlaps seen {row['gpu_overlaps_seen']}, all completed {row['all_completed']}",
                    flush=True,
                )
    finally:
        cluster.down()
    gaps = [float(r["gap_pct"]) for r in rows]  # type: ignore[arg-type]
    summary = {"runs": rows, "mean_gap_pct": round(statistics.fmean(gaps), 1), "gap_pct_range": [min(gaps), max(gaps)]}
    if a.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"mean gap {summary['mean_gap_pct']:+.1f}% (runs {min(gaps):+.1f}% to {max(gaps):+.1f}%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slice", type=float, default=4.0, help="slice length in seconds (default 4)")
    ap.add_argument("--slices", type=int, default=8, help="switches per mechanism (default 8)")
    ap.add_argument("--migrations", type=int, default=3, help="migrations (default 3)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    ap.add_argument("--only", choices=("suspend", "requeue", "migration", "livesim"), help="run one part only")
    ap.add_argument("--nodes", type=int, default=2, help="livesim: nodes (default 2)")
    ap.add_argument("--gpus", type=int, default=4, help="livesim: GPUs per node (default 4)")
    ap.add_argument("--runs", type=int, default=1, help="livesim: workloads (seeds 1..N, default 1)")
    ap.add_argument("--timeout", type=float, default=900.0, help="livesim: seconds per run (default 900)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_gandiva_live: the local Slurm cluster needs root")
    if a.only == "livesim":
        if a.slice == 4.0:
            a.slice = 10.0  # the controller polls every second: slices of 10 s
        main_livesim(a)
        return
    cfg = ClusterConfig(
        dir=Path(os.environ.get("TEIRESIAS_BENCH_CLUSTER_DIR", "/var/tmp/teiresias-bench-gandiva")),
        nodes=2,
        gpus_per_node=1,
        shards_per_gpu=2,
        port_base=int(os.environ.get("TEIRESIAS_BENCH_CLUSTER_PORT_BASE", "17260")),
        partitions=("gpu",),
    )
    cluster = LocalCluster(cfg)
    cluster.up()
    try:
        env = client_env(cfg.conf)
        with tempfile.TemporaryDirectory(prefix="bench-gandiva-", dir="/var/tmp") as tmp:
            work = Path(tmp)
            os.chmod(work, 0o755)
            b = Bench(CliBackend(env=env), env, work)
            out: dict[str, object] = {}
            parts = (
                ("suspend_resume", "suspend", lambda: bench_suspend(b, a.slice, a.slices)),
                ("checkpoint_requeue", "requeue", lambda: bench_requeue(b, a.slice, a.slices)),
                ("migration", "migration", lambda: bench_migrate(b, a.migrations)),
            )
            for name, key, run in parts:
                if a.only and a.only != key:
                    continue
                row = run()
                out[name] = row
                if not a.json:
                    print(name)
                    for k, v in row.items():
                        print(f"  {k:32} {v}", flush=True)
                cluster.cancel_all_jobs()
    finally:
        cluster.down()
    if a.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
