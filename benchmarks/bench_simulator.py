"""Simulator benchmark: replay speed and the policy comparison of Tiresias Table 5.

Prints figures (nothing is asserted); docs/benchmarks.md ("Simulator") records
them with this command line.

1. Speed: jobs simulated per second for 1k / 10k / 100k-job Philly-like traces
   on 256 nodes x 8 GPUs (the reference simulator's n256g8), with the share of
   wall time spent inside ``policy.decide`` (the rest is the engine).
2. Decision time of one ``las`` round with 10,000 pending jobs on that cluster.
3. Policy comparison on a contended Philly-like trace, normalised to las,
   beside Tiresias Table 5.
4. The paper's testbed workload (§5.1 mix) replayed, beside §5.2 / §5.3.1.

    .venv/bin/python benchmarks/bench_simulator.py                    # everything
    .venv/bin/python benchmarks/bench_simulator.py --sizes 1000,10000 --skip-compare
    .venv/bin/python benchmarks/bench_simulator.py --policies las,fifo,gittins --compare-full \\
        --skip-round --skip-compare --skip-testbed          # old (full rounds) vs new, side by side
    .venv/bin/python benchmarks/bench_simulator.py --sizes 15000 --nodes 75 --policies las,gittins \\
        --max-duration 604800 --compare-keyed --skip-round --skip-compare --skip-testbed   # kept rounds off vs on
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from pathlib import Path

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.report import normalised_table, summary_table
from teiresias.simulator.synth import PhillyParams, philly_like

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SAMPLES = [
    Path("/work/shared/traces/tiresias-yarn-gput10000.csv"),
    ROOT / "tests" / "fixtures" / "traces" / "tiresias-yarn-gput1000.csv",
]
# Tiresias Table 5 (simulation of the Microsoft trace), normalised to Tiresias-L.
TABLE5 = {
    "fifo": (2.41, 30.85, 1.25),
    "best-effort": (1.50, 9.03, 1.08),
    "srtf": (1.00, 1.00, 0.84),
    "gittins": (0.97, 1.00, 0.85),
    "las": (1.00, 1.00, 1.00),
}


class TimedPolicy:
    """Delegates to a real policy and adds up the time spent deciding."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        # The simulator's shortcuts look for these marks (idle_first, preemptive, the
        # placement's monotone, quiet_until): pass them on.
        self.idle_first = getattr(inner, "idle_first", False)
        self.preemptive = getattr(inner, "preemptive", True)
        self.placement = getattr(inner, "placement", None)
        if callable(getattr(inner, "quiet_until", None)):
            self.quiet_until = inner.quiet_until
        if callable(getattr(inner, "rank_keys", None)):
            self.rank_keys = inner.rank_keys
        if callable(getattr(inner, "decide_kept", None)):
            self.decide_kept = self._decide_kept
        self.seconds = 0.0
        self.calls = 0

    def decide(self, snapshot):
        t = time.perf_counter()
        plan = self.inner.decide(snapshot)
        self.seconds += time.perf_counter() - t
        self.calls += 1
        return plan

    def _decide_kept(self, snapshot, kept):
        t = time.perf_counter()
        plan = self.inner.decide_kept(snapshot, kept)
        self.seconds += time.perf_counter() - t
        self.calls += 1
        return plan


def records_hash(records) -> str:
    """A short hash of a replay's job records: equal hashes, equal decisions (old vs new trees)."""
    return hashlib.sha1(repr(sorted(records, key=lambda r: r.job_id)).encode()).hexdigest()[:12]


def speed(
    samples,
    sizes: list[int],
    policies: list[str],
    load: float,
    seed: int,
    max_duration: float,
    compare_full: bool = False,
    compare_keyed: bool = False,
    cluster: Cluster | None = None,
    params: PolicyParams | None = None,
) -> None:
    """Replay speed; with ``compare_full`` each replay also runs with every round seeing every job
    and every tick run (``prune_rounds`` / ``skip_quiet_ticks`` off: the engine before they
    existed, same policy code), side by side, and the two results must agree. With
    ``compare_keyed`` the "before" replay has only ``keyed_rounds`` off (no kept rounds: contended rounds see
    every running job, as before the engine kept rank keys)."""
    cluster = cluster or Cluster.from_tiresias_spec(8, 32, 8)  # n256g8
    params = params or PolicyParams(distribution=ServiceDistribution(samples))
    print(
        f"== speed: Philly-like traces at offered load {load} (jobs <= {max_duration:g} s) "
        f"on {cluster.total_gpus} GPUs ({len(cluster.nodes)} nodes), interval 60 s, "
        f"queues {list(params.queues)}, last queue {params.last_queue}, preempt cost {params.preempt_cost:g} =="
    )
    print(
        "(CPU s = this process's CPU time: on a shared machine it is the figure to compare;\n"
        " jobs/s and ms/round are per CPU second; 'in policy' = share of wall time inside decide();\n"
        " pruned = rounds the policy saw only pending jobs (all, or the newcomers); mode full = no pruning,\n"
        " no tick skipping; mode unkeyed = no kept rounds (contended rounds see every running job))"
    )
    print(
        f"{'jobs':>7} {'policy':>12} {'mode':>6} {'wall s':>8} {'CPU s':>8} {'jobs/s':>8} {'rounds':>8} "
        f"{'pruned':>8} {'ms/round':>9} {'in policy':>9} {'avg JCT':>9} {'avg queue':>9} {'records':>12}"
    )
    modes = (
        [("full", {"prune_rounds": False, "skip_quiet_ticks": False}), ("fast", {})] if compare_full else [("fast", {})]
    )
    if compare_keyed:
        modes = [("unkeyed", {"keyed_rounds": False}), ("fast", {})]
    for n in sizes:
        trace = philly_like(
            samples,
            PhillyParams(num_jobs=n, cluster_gpus=cluster.total_gpus, load=load, max_duration=max_duration),
            seed=seed,
        )
        for name in policies:
            records = []
            for mode, kw in modes:
                pol = TimedPolicy(build_policy(name, params))
                sim = Simulator(
                    trace, cluster, pol, SimulationOptions(interval=60.0, progress=False, record_timeline=False, **kw)
                )
                t, c = time.perf_counter(), time.process_time()
                res = sim.run()
                wall, cpu = time.perf_counter() - t, time.process_time() - c
                s = res.summary
                records.append(res.records)
                print(
                    f"{n:>7} {name:>12} {mode:>6} {wall:>8.2f} {cpu:>8.2f} {n / cpu:>8.0f} {s.rounds:>8} "
                    f"{sim.pruned_rounds + sim.extended_rounds:>8} {1000 * cpu / max(s.rounds, 1):>9.3f} "
                    f"{100 * pol.seconds / wall:>8.0f}% {s.avg_jct:>9.0f} {s.avg_queue_delay:>9.0f} "
                    f"{records_hash(res.records):>12}",
                    flush=True,
                )
            if len(records) == 2 and records[0] != records[1]:
                print(f"!! {name} at {n} jobs: {modes[0][0]} and fast replays differ", flush=True)


def las_round(pending: int = 10_000, running: int = 600) -> None:
    """One las decision with ``pending`` waiting jobs and a busy 256 x 8 cluster."""
    cluster = Cluster.from_tiresias_spec(8, 32, 8)
    jobs: list[Job] = []
    node = 0
    for i in range(running):  # 600 jobs of 1-4 GPUs: about 1,500 of 2,048 GPUs busy
        g = 1 + i % 4
        name = cluster.nodes[node].name
        node = (node + 1) % len(cluster.nodes)
        jobs.append(
            Job(
                JobId(i),
                g,
                float(i),
                state=JobState.RUNNING,
                first_start_time=float(i),
                executed_time=float(10 * i % 5000),
                placement=Placement.of({name: g}),
            )
        )
    for i in range(running, running + pending):
        jobs.append(
            Job(
                JobId(i),
                1 + i % 8,
                float(i),
                executed_time=float(7 * i % 9000),
                first_start_time=float(i) if i % 3 else None,
            )
        )
    snap = Snapshot(float(running + pending), cluster, jobs)
    pol = build_policy("las")
    times = []
    for _ in range(5):
        t = time.perf_counter()
        pol.decide(snap)
        times.append(time.perf_counter() - t)
    print(
        f"== one las round: {pending} pending + {running} running jobs on 256 x 8 GPUs: "
        f"median {1000 * statistics.median(times):.1f} ms (min {1000 * min(times):.1f}, 5 runs) =="
    )


def compare(samples, num_jobs: int, load: float, nodes: int, seed: int, overhead: float) -> None:
    cluster = Cluster.from_tiresias_spec(1, nodes, 8)
    trace = philly_like(
        samples,
        PhillyParams(num_jobs=num_jobs, cluster_gpus=cluster.total_gpus, load=load, max_duration=86400.0),
        seed=seed,
    )
    dist = ServiceDistribution(samples)
    params = PolicyParams(distribution=dist)
    opt = SimulationOptions(interval=60.0, preempt_overhead=overhead, progress=False)
    print(
        f"== policy comparison: {num_jobs} Philly-like jobs, load {load}, {nodes} nodes x 8 GPUs, "
        f"jobs <= 1 day, interval 60 s, preemption overhead {overhead:g} s, queues (2, 1h) ==",
        flush=True,
    )
    results = []
    for name in ("las", "gittins", "srtf", "best-effort", "fifo"):
        results.append(Simulator(trace, cluster, build_policy(name, params), opt).run())
    print(summary_table(results))
    print()
    print(normalised_table(results))
    print()
    print("Tiresias Table 5 (paper)   Average  Median   95th")
    for r in results:
        a, m, p = TABLE5[r.policy]
        print(f"{r.policy:<25} {a:>7.2f}x {m:>6.2f}x {p:>5.2f}x")


def testbed(seed: int, overhead: float) -> None:
    """Tiresias §5.2/§5.3.1 setting: the 480-job testbed mix on 15 x 4 GPUs, (2, 3200 GPU-s), profile placement.

    Tiresias-G's distribution is "previous experience": the GPU-times of
    another testbed workload drawn with a different seed.
    """
    from teiresias.simulator.synth import testbed_mix

    cluster = Cluster.from_tiresias_spec(1, 15, 4)
    trace = testbed_mix(seed=seed)
    history = ServiceDistribution([j.num_gpus * j.duration for j in testbed_mix(seed=seed + 1000)])
    params = PolicyParams(queues=(3200.0,), placement="profile", distribution=history)
    opt = SimulationOptions(interval=60.0, preempt_overhead=overhead, progress=False)
    print(
        f"== testbed mix (Tiresias §5.1): 480 jobs on 15 x 4 GPUs, queues (2, 3200 GPU-s), profile placement, "
        f"preemption overhead {overhead:g} s ==",
        flush=True,
    )
    results = [
        Simulator(trace, cluster, build_policy(n, params), opt).run()
        for n in ("las", "gittins", "srtf", "best-effort", "fifo")
    ]
    print(summary_table(results))
    print()
    print(normalised_table(results))
    print(
        "paper, testbed (Fig. 10, §5.2): YARN-CS 5.5x avg; simulator replay (§5.3.1): YARN-CS 5.11x, "
        "SRTF 0.74x, Tiresias-G 1.01x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--policies", default="las,fifo")
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--max-duration", type=float, default=86400.0, help="cap on job duration, s [1 day]")
    ap.add_argument("--samples", default=None, help="GPU-time samples CSV [default: yarn-gput10000 if present]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compare-jobs", type=int, default=4000)
    ap.add_argument("--compare-load", type=float, default=1.2)
    ap.add_argument("--compare-nodes", type=int, default=32)
    ap.add_argument("--compare-overhead", type=float, default=0.0)
    ap.add_argument(
        "--compare-full",
        action="store_true",
        help="also replay with pruning and tick skipping off, side by side (the old engine's work)",
    )
    ap.add_argument(
        "--compare-keyed",
        action="store_true",
        help="also replay with kept rounds off, side by side (every contended round sees every running job)",
    )
    ap.add_argument("--nodes", type=int, default=256, help="speed: nodes of 8 GPUs [256]")
    ap.add_argument("--last-queue", default="fifo", help="speed: gittins' last queue order [fifo]")
    ap.add_argument("--preempt-cost", type=float, default=0.0, help="speed: gittins' preemption cost, s [0]")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-round", action="store_true")
    ap.add_argument("--skip-compare", action="store_true")
    ap.add_argument("--skip-testbed", action="store_true")
    ap.add_argument("--testbed-overhead", type=float, default=0.0)
    a = ap.parse_args()
    path = Path(a.samples) if a.samples else next(p for p in DEFAULT_SAMPLES if p.exists())
    samples = ServiceDistribution.from_samples_file(path).samples
    print(f"GPU-time samples: {path} ({len(samples)} values)")
    if not a.skip_speed:
        params = PolicyParams(
            distribution=ServiceDistribution(samples), last_queue=a.last_queue, preempt_cost=a.preempt_cost
        )
        speed(
            samples,
            [int(x) for x in a.sizes.split(",")],
            a.policies.split(","),
            a.load,
            a.seed,
            a.max_duration,
            a.compare_full,
            a.compare_keyed,
            Cluster.from_tiresias_spec(8, 32, 8) if a.nodes == 256 else Cluster.from_tiresias_spec(1, a.nodes, 8),
            params,
        )
    if not a.skip_round:
        las_round()
    if not a.skip_compare:
        compare(samples, a.compare_jobs, a.compare_load, a.compare_nodes, a.seed, a.compare_overhead)
    if not a.skip_testbed:
        testbed(a.seed, a.testbed_overhead)


if __name__ == "__main__":
    main()
