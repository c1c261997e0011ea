"""Jobs that cannot checkpoint, and minimum run times (issue 20 B12), in the simulator.

The workload is the Tiresias §5.1 testbed mix (480 jobs on 15 x 4 GPUs, queues
(2, 3200 GPU-s), profile placement; bench_simulator.py --testbed's setting) with a
seeded fraction of its jobs marked plain: their preemption loses all their work
since they started, as a plain `sbatch` job's requeue does live. Each row is one
minimum-run rule (teiresias.policy.protect.MinRun): the paper's (no protection),
plain jobs protected for N seconds, plain jobs never preempted once started, and a
short minimum run for every job. Several seeds, same rules side by side.

Example:
    nice -n 10 .venv/bin/python benchmarks/bench_plain_jobs.py --seeds 0,1,2 --plain 0.3
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from teiresias.domain import Cluster
from teiresias.policy.protect import MinRun
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator.engine import SimulationOptions, Simulator
from teiresias.simulator.synth import testbed_mix

RULES: dict[str, MinRun] = {
    "none (paper)": MinRun(0.0, 0.0),
    "plain 300 s": MinRun(0.0, 300.0),
    "plain 1800 s": MinRun(0.0, 1800.0),
    "plain never": MinRun(0.0, math.inf),
    "all 60 s, plain never": MinRun(60.0, math.inf),
    "all 60 s, plain 0 s": MinRun(60.0, 0.0),
}


def one(seed: int, fraction: float, rule: MinRun, overhead: float) -> dict[str, float]:
    cluster = Cluster.from_tiresias_spec(1, 15, 4)
    trace = testbed_mix(seed=seed)
    rng = random.Random(seed)
    plain = frozenset(j.job_id for j in trace if rng.random() < fraction)
    opt = SimulationOptions(interval=60.0, preempt_overhead=overhead, progress=False, min_run=rule, plain_jobs=plain)
    sim = Simulator(trace, cluster, build_policy("las", PolicyParams(queues=(3200.0,), placement="profile")), opt)
    res = sim.run()
    jct = {r.job_id: r.jct for r in res.records}
    return {
        "avg": statistics.fmean(jct.values()),
        "plain": statistics.fmean(v for j, v in jct.items() if j in plain) if plain else 0.0,
        "ckpt": statistics.fmean(v for j, v in jct.items() if j not in plain),
        "lost_gpu_h": sim.lost_gpu_seconds / 3600.0,
        "preemptions": float(res.summary.preemptions),
        "makespan_h": res.summary.makespan / 3600.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--plain", type=float, default=0.3, help="fraction of jobs that cannot checkpoint [0.3]")
    ap.add_argument("--overhead", type=float, default=0.0, help="preemption overhead of every resume, s [0]")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(
        f"testbed mix, 480 jobs on 15 x 4 GPUs, las (2, 3200 GPU-s), profile placement, {args.plain:.0%} plain jobs,"
        f" overhead {args.overhead:g} s, seeds {seeds}; JCT means in s, each seed's ratio to the first row"
    )
    base: dict[int, dict[str, float]] = {}
    print(f"{'rule':<24}{'avg JCT':>10}{'plain':>10}{'ckpt':>10}{'lost GPU-h':>12}{'preempt':>9}  vs paper")
    for name, rule in RULES.items():
        t0 = time.perf_counter()
        rows = {s: one(s, args.plain, rule, args.overhead) for s in seeds}
        if not base:
            base = rows
        mean = {k: statistics.fmean(r[k] for r in rows.values()) for k in rows[seeds[0]]}
        ratios = " ".join(f"{rows[s]['avg'] / base[s]['avg']:.3f}" for s in seeds)
        print(
            f"{name:<24}{mean['avg']:>10.0f}{mean['plain']:>10.0f}{mean['ckpt']:>10.0f}"
            f"{mean['lost_gpu_h']:>12.1f}{mean['preemptions']:>9.0f}  {ratios}  ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
