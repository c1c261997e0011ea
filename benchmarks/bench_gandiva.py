"""Gandiva (docs/gandiva.md) on our simulator, side by side with las and fifo in one run:

1. a hyper-parameter search (16 configurations of one model, successive halving) on 4 GPUs:
   when the best configuration finishes, and when the whole search does (paper: up to 10x
   sooner under time-slicing, §6.2);
2. time to early feedback: until each configuration reaches its first rung, and on a
   Philly-like trace until each job has done its first 10 minutes of work (paper: up to -77%);
3. utilisation with packing and migration on a Philly-like trace (paper: +26%, §6.3).

    .venv/bin/python benchmarks/bench_gandiva.py [--seeds 5] [--configs 16,64] [--jobs 200] [--out DIR]

Prints markdown tables for docs/benchmarks.md ("Gandiva"); writes the Philly-like trace,
cluster and slowdown table to DIR so `teiresias simulate` reproduces its rows (the command
is printed).

The search, built here: 16 (or 64) configurations of one model submitted at once, each a job
that trains 16R (64R) seconds unless stopped, under synchronous successive halving at eta = 2 with a
first rung of R seconds (class Halving, through Simulator.watch): once every surviving
configuration has trained the rung's budget (R, 2R, 4R, ...), the worse half is stopped.
Which configuration is better is a seeded random permutation of the submission order. A
policy that runs jobs to completion in arrival order (fifo) keeps the GPUs busy with the
first four configurations until they finish: the first decision waits for the last four
to reach R ("stuck with a sub-optimal set of jobs", Gandiva §6.2). The model is ResNet-50
(Gandiva Table 1: 94% GPU utilisation, so packing never pays: this isolates time-slicing).
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path

from teiresias.domain import Cluster, JobId
from teiresias.policy.gandiva import GandivaParams
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.metrics import SimulationResult
from teiresias.simulator.slowdown import ModelProfile, SlowdownTable
from teiresias.simulator.synth import PhillyParams, philly_like
from teiresias.simulator.trace import TraceJob, write_trace

SAMPLES = Path(__file__).resolve().parents[1] / "teiresias" / "data" / "yarn-gput10000.csv"
RUNG = 600.0  # seconds of the first rung
# Gandiva Table 1 (GPU utilisation alone, %); the models of the Philly-like trace, plus vgg16
# (placement-sensitive, Tiresias Fig. 12: 1.64x slower spread) for migration to matter.
TABLE1 = {
    "vae": 8.7,
    "superresolution": 14.1,
    "rhn": 61.6,
    "scrnn": 66.8,
    "mi-lstm": 76.2,
    "lstm": 87.2,
    "resnet50": 94.0,
    "resnext50": 98.9,
}
SLOWDOWN = SlowdownTable(
    models={**{m: ModelProfile(None, 1.0, u) for m, u in TABLE1.items()}, "vgg16": ModelProfile(0.743, 1.64, None)}
)


class Halving:
    """Synchronous successive halving over a replay (Simulator.watch): when every surviving
    configuration has done the rung's work (R, 2R, 4R, ... seconds), the worse half is stopped.
    Checked every ``step`` seconds of simulated time (a decision lands at most that late)."""

    def __init__(self, sim: Simulator, worst_first: list[int], step: float = 10.0) -> None:
        self.sim = sim
        self.alive = list(worst_first)  # worst to best
        self.rung = RUNG
        self.step = step

    def __call__(self, now: float) -> float:
        while len(self.alive) > 1:
            done = {j: self.sim.work_done(JobId(j)) for j in self.alive}  # None: trained to the end
            if any(w is not None and w < self.rung - 1e-6 for w in done.values()):
                return now + self.step
            half = len(self.alive) // 2
            for j in self.alive[:half]:
                if done[j] is not None:
                    self.sim.stop_job(JobId(j), now)
            self.alive = self.alive[half:]
            self.rung *= 2
        return float("inf")


def search_trace(configs: int, seed: int) -> tuple[list[TraceJob], list[int]]:
    """``configs`` (a power of 2) configurations submitted at once, each able to train configs x R
    if never stopped; returns the trace and the ids from worst to best (a seeded random
    permutation of submission order)."""
    order = list(range(configs))
    random.Random(seed).shuffle(order)
    return [TraceJob(i, 1, 0.0, configs * RUNG, "resnet50") for i in range(configs)], order


def run(
    trace: list[TraceJob],
    cluster: Cluster,
    policy: str,
    feedback: float,
    gandiva: GandivaParams | None = None,
    placement: str = "consolidate",
    worst_first: list[int] | None = None,
) -> SimulationResult:
    params = PolicyParams(placement=placement, gandiva=gandiva)
    # Costs measured live (docs/benchmarks.md "Gandiva live costs"): a checkpoint/requeue switch
    # 4.6 s (every preemption), a migration or resize 6.9 s (the engine's default).
    opt = SimulationOptions(
        slowdown=SLOWDOWN, progress=False, feedback=feedback, preempt_overhead=4.6, record_timeline=False
    )
    sim = Simulator(trace, cluster, build_policy(policy, params), opt)
    if worst_first is not None:
        sim.watch(Halving(sim, worst_first))
    return sim.run()


def part_search(configs: int, seeds: int) -> None:
    cluster = Cluster.from_tiresias_spec(1, 1, 4)
    # Every configuration time-slices from the start (the paper caps no height; ours defaults to 4).
    height = GandivaParams(max_height=max(configs // cluster.total_gpus, 1))
    rows: dict[str, list[tuple[float, float, float]]] = {}
    for seed in range(seeds):
        trace, worst_first = search_trace(configs, seed)
        best = worst_first[-1]
        for name in ("fifo", "las", "gandiva"):
            r = run(trace, cluster, name, RUNG, height if name == "gandiva" else None, worst_first=worst_first)
            end = {rec.job_id: rec.end for rec in r.records}
            rows.setdefault(name, []).append((end[best], r.summary.makespan, r.summary.avg_feedback))
    print(
        f"### 1-2. Hyper-parameter search: {configs} configurations, synchronous successive halving (first"
        f" rung {RUNG:.0f} s, doubling; the best trains {configs * RUNG:.0f} s), 4 GPUs, gandiva --max-height"
        f" {height.max_height}, {seeds} seeds (medians)\n"
    )
    print("| policy | best config done (s) | vs fifo | avg time to first rung (s) | vs fifo |")
    print("|---|---|---|---|---|")
    base = [statistics.median(x[i] for x in rows["fifo"]) for i in range(3)]
    for name, xs in rows.items():
        med = [statistics.median(x[i] for x in xs) for i in range(3)]
        print(
            f"| {name} | {med[0]:.0f} | {base[0] / med[0]:.2f}x sooner | {med[2]:.0f} |"
            f" {100 * (med[2] / base[2] - 1):+.0f}% |"
        )
    per_seed = [f / g for (f, _, _), (g, _, _) in zip(rows["fifo"], rows["gandiva"], strict=True)]
    print(f"\nbest configuration done, gandiva vs fifo per seed: {', '.join(f'{x:.2f}x' for x in per_seed)}\n")


def philly(jobs: int, seed: int) -> tuple[list[TraceJob], Cluster]:
    samples = [float(x) for x in SAMPLES.read_text().split()[1:]]
    cluster = Cluster.from_tiresias_spec(1, 4, 4)
    p = PhillyParams(num_jobs=jobs, cluster_gpus=16, load=1.5, max_gpus=8, max_duration=6 * 3600.0)
    models = sorted(TABLE1) + ["vgg16"]
    rng = random.Random(seed)
    trace = [
        TraceJob(j.job_id, j.num_gpus, j.submit_time, j.duration, rng.choice(models))
        for j in philly_like(samples, p, seed)
    ]
    return trace, cluster


def part_philly(jobs: int, out: Path | None) -> None:
    trace, cluster = philly(jobs, 0)
    variants: list[tuple[str, str, GandivaParams | None, str]] = [
        ("fifo", "fifo", None, "consolidate"),
        ("las", "las", None, "consolidate"),
        ("gandiva", "gandiva", None, "spread"),
        ("gandiva --no-pack", "gandiva", GandivaParams(packing=False), "spread"),
        ("gandiva --no-migration", "gandiva", GandivaParams(migration=False), "spread"),
        ("gandiva --no-pack --no-migration", "gandiva", GandivaParams(packing=False, migration=False), "spread"),
    ]
    print(
        f"### 2-3. Philly-like trace: {len(trace)} jobs (GPU-time from the Philly samples, 1-8 GPUs, at most 6 h,"
        " load 1.5), models drawn from Gandiva Table 1 and vgg16, 16 GPUs (4 x 4)\n"
    )
    print(
        "| policy | avg JCT (s) | GPUs held | useful util | avg feedback (s) | med feedback (s) | max height |"
        " suspend | migrate | pack | unpack |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, name, gp, placement in variants:
        s = run(trace, cluster, name, 600.0, gp, placement).summary
        print(
            f"| {label} | {s.avg_jct:.0f} | {100 * s.gpu_utilization:.1f}% | {100 * s.useful_utilization:.1f}% |"
            f" {s.avg_feedback:.0f} | {s.median_feedback:.0f} | {s.max_height} | {s.suspensions} | {s.migrations} |"
            f" {s.packs} | {s.unpacks} |"
        )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_trace(out / "philly-table1.csv", trace)
        (out / "cluster.yaml").write_text("num_switch: 1\nnum_node_p_switch: 4\nnum_gpu_p_node: 4\n")
        lines = ["pack_overhead: 0.15", "models:"]
        lines += [f"  {m}: {{skew: null, slowdown: 1.0, gpu_util: {u}}}" for m, u in TABLE1.items()]
        lines += ["  vgg16: {skew: 0.743, slowdown: 1.64}"]
        (out / "slowdown.yaml").write_text("\n".join(lines) + "\n")
        print(
            f"\nreproduce a row: teiresias simulate -t {out}/philly-table1.csv -c {out}/cluster.yaml "
            f"--slowdown {out}/slowdown.yaml -p gandiva -P spread -o 4.6 --feedback 600"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument(
        "--configs",
        type=lambda x: [int(c) for c in x.split(",")],
        default=[16, 64],
        help="search sizes (powers of 2), comma-separated",
    )
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    for configs in a.configs:
        part_search(configs, a.seeds)
    part_philly(a.jobs, a.out)


if __name__ == "__main__":
    main()
