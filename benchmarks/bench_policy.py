"""Decision time of one scheduling round on a large cluster (prints figures).

One round = one ``policy.decide(snapshot)`` call, as the simulator and the
controller make it, on Cluster.from_tiresias_spec(8, 32, 8) (256 nodes x 8
GPUs = 2,048 GPUs) packed with running jobs. Two snapshots:

- backlog: plus 10,000 waiting jobs whose sizes and attained services follow
  a Philly-like mix (GPU counts 1-32; attained services across both queues);
- steady: plus 50 waiting jobs, the typical round of a trace replay, where
  the simulator decides once per event (so rounds/second bounds replay speed).

    .venv/bin/python benchmarks/bench_policy.py [--pending 10000] [--rounds 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy

SAMPLES = Path("/work/shared/traces/tiresias-yarn-gput10000.csv")
SIZES = [1] * 70 + [2] * 10 + [4] * 10 + [8] * 7 + [16] * 2 + [32] * 1  # GPUs, Philly-like mix


def make_snapshot(n_pending: int, seed: int, quiet: bool = False) -> Snapshot:
    rng = random.Random(seed)
    cluster = Cluster.from_tiresias_spec(8, 32, 8)
    free = {n.name: n.gpus for n in cluster.nodes}
    jobs: list[Job] = []
    jid = 0
    # Fill nodes with running jobs of up to 8 GPUs (single-node), a few larger ones.
    names = [n.name for n in cluster.nodes]
    for name in names:
        while free[name] > 0:
            g = min(rng.choice([1, 1, 2, 4, 8]), free[name])
            free[name] -= g
            executed = rng.choice([30.0, 600.0, 3000.0, 20000.0])
            jobs.append(
                Job(
                    JobId(jid),
                    g,
                    submit_time=rng.uniform(0, 5000),
                    state=JobState.RUNNING,
                    first_start_time=rng.uniform(5000, 9000),
                    executed_time=executed,
                    total_executed_time=executed,
                    duration=executed + rng.uniform(10, 50000),
                    placement=Placement.of({name: g}),
                )
            )
            jid += 1
    n_running = len(jobs)
    for _ in range(n_pending):
        g = rng.choice(SIZES)
        started = rng.random() < 0.4
        executed = rng.choice([0.0, 100.0, 2000.0, 40000.0]) if started else 0.0
        jobs.append(
            Job(
                JobId(jid),
                g,
                submit_time=rng.uniform(0, 10000),
                first_start_time=rng.uniform(0, 9000) if started else None,
                executed_time=executed,
                total_executed_time=executed,
                waiting_time=rng.uniform(0, 5000),
                duration=executed + rng.uniform(10, 50000),
            )
        )
        jid += 1
    rng.shuffle(jobs)
    if not quiet:
        print(f"snapshot: {len(cluster.nodes)} nodes x 8 GPUs, {n_running} running, {n_pending} waiting jobs")
    return Snapshot(10000.0, cluster, jobs)


def time_rounds(name: str, params: PolicyParams, snap: Snapshot, rounds: int) -> tuple[float, float, int, int]:
    """Median wall and median CPU seconds of one round, and what the round decided.

    CPU time is the figure to compare on a shared machine: wall time grows with
    other people's load, this process's CPU time much less.
    """
    policy = build_policy(name, params)
    walls, cpus = [], []
    plan = None
    for _ in range(rounds):
        w0, c0 = time.perf_counter(), time.process_time()
        plan = policy.decide(snap)
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return statistics.median(walls), statistics.median(cpus), len(plan.start), len(plan.preempt)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    snap = make_snapshot(args.pending, args.seed)
    dist = (
        ServiceDistribution.from_samples_file(SAMPLES)
        if SAMPLES.exists()
        else ServiceDistribution.from_values(random.Random(0).lognormvariate(7.7, 2.5) for _ in range(10000))
    )
    cases = [
        ("fifo", PolicyParams()),
        ("best-effort", PolicyParams()),
        ("srsf", PolicyParams()),
        ("las", PolicyParams()),
        ("las", PolicyParams(placement="profile")),
        ("las", PolicyParams(promote_knob=1.0)),
        ("gittins", PolicyParams(distribution=dist)),
        ("las", PolicyParams(continuous=True)),
        ("gittins", PolicyParams(distribution=dist, continuous=True)),
    ]
    steady = make_snapshot(50, args.seed, quiet=True)
    print(f"steady snapshot: same running jobs, {sum(not j.is_running for j in steady.jobs)} waiting jobs")
    print("median of the rounds; CPU = this process's CPU time (compare these on a shared machine)")
    print(
        f"{'policy':<10} {'variant':<22} {'backlog wall ms':>15} {'CPU ms':>8} {'started':>8} "
        f"{'preempted':>9} {'steady wall ms':>15} {'CPU ms':>8}"
    )
    for name, params in cases:
        variant = []
        if params.placement != "consolidate":
            variant.append(params.placement)
        if params.promote_knob is not None:
            variant.append(f"knob={params.promote_knob:g}")
        if params.continuous:
            variant.append("continuous")
        wall, cpu, started, preempted = time_rounds(name, params, snap, args.rounds)
        s_wall, s_cpu, _, _ = time_rounds(name, params, steady, args.rounds * 10)
        print(
            f"{name:<10} {','.join(variant) or 'default':<22} {wall * 1e3:>15.1f} {cpu * 1e3:>8.1f} "
            f"{started:>8} {preempted:>9} {s_wall * 1e3:>15.2f} {s_cpu * 1e3:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
