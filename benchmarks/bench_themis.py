"""Themis (docs/themis.md): auction solve time at 64 apps x 512 GPUs, and a side-by-side replay of a
multi-app Philly-like trace under themis, las and fifo, with the f knob swept and a misreporting app.

    .venv/bin/python benchmarks/bench_themis.py [--seed 0] [--out DIR] [--contended-only]

Writes each trace and cluster to DIR (so `teiresias simulate` reproduces a row of the side-by-side
table: the commands are printed) and prints markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.base import SchedulingPolicy
from teiresias.policy.placement import ConsolidatePlacement
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.themis.auction import Bid, auction
from teiresias.policy.themis.policy import ThemisPolicy
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.metrics import Summary
from teiresias.simulator.synth import PhillyParams, philly_like, with_apps
from teiresias.simulator.trace import TraceJob, write_trace

SAMPLES = Path(__file__).resolve().parents[1] / "teiresias" / "data" / "yarn-gput10000.csv"
CLUSTER_YAML = "num_switch: 2\nnum_node_p_switch: 4\nnum_gpu_p_node: 8\n"  # 64 GPUs, racks of 32


def solve_times(n_apps: int, rounds: int, seed: int) -> dict[str, float]:
    """One auction round at n_apps x 512 GPUs (64 nodes x 8): every app has 1-8 waiting jobs of 1-8 GPUs,
    half the GPUs are held by jobs whose lease ended. Median seconds of policy.decide (f = 0.8: the
    13 farthest-from-fair apps bid) and of the auction alone when all n_apps bid (f -> 0)."""
    rng = random.Random(seed)
    cluster = Cluster.from_tiresias_spec(8, 8, 8)
    jobs: list[Job] = []
    nodes = [n.name for n in cluster.nodes]
    for i, name in enumerate(nodes[:32]):  # half the cluster runs expired-lease jobs
        jobs.append(
            Job(
                JobId(len(jobs)),
                8,
                0.0,
                app=f"app{i % n_apps}",
                state=JobState.RUNNING,
                placement=Placement.of({name: 8}),
                first_start_time=0.0,
                executed_time=900.0,
                total_executed_time=900.0,
                duration=900.0 + rng.uniform(600, 36000),
                lease_end=600.0,
            )
        )
    for a in range(n_apps):
        for _ in range(rng.randint(1, 8)):
            jobs.append(
                Job(
                    JobId(len(jobs)),
                    rng.choice([1, 1, 2, 4, 8]),
                    rng.uniform(0, 600),
                    app=f"app{a}",
                    duration=rng.uniform(60, 36000),
                )
            )
    snap = Snapshot(1000.0, cluster, jobs)
    out: dict[str, float] = {"jobs": float(len(jobs))}
    for label, f in (("decide_f0.8", 0.8), ("decide_f0.01", 0.01)):
        pol = ThemisPolicy(ConsolidatePlacement(), fairness_knob=f)
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            pol.decide(snap)
            times.append(time.perf_counter() - t0)
        out[label] = statistics.median(times)
    # The auction alone, every app bidding for levels of its jobs on the 512 GPUs.
    bids = []
    for a in range(n_apps):
        g = sorted(rng.choice([1, 2, 4, 8]) for _ in range(rng.randint(1, 8)))
        levels = [0]
        for x in g:
            levels.append(levels[-1] + x)
        rho0 = rng.uniform(1.0, 5.0)
        bids.append(Bid(f"app{a}", tuple(levels), tuple(rho0 / (1 + k) for k in range(len(levels)))))
    cap = {n: 8 for n in nodes}
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        auction(bids, cap)
        times.append(time.perf_counter() - t0)
    out["auction_all_bid"] = statistics.median(times)
    return out


# The traces of the side-by-side table: (jobs, apps, GPUs, offered load). The 16-GPU one is as
# contended as the paper's quarter-size cluster (Themis §6.3, Fig. 14); the f sweep and the
# misreporting check run on it, where apps compete for GPUs at every round.
TRACES = ((600, 24, 64, 1.2), (600, 8, 64, 1.5), (200, 12, 16, 2.0))
POLICIES = ("themis", "las", "fifo")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="/tmp/bench-themis")
    ap.add_argument(
        "--contended-only",
        action="store_true",
        help="only the contended trace (200 jobs, 12 apps, 16 GPUs, load 2): side by side, f sweep, misreporting",
    )
    a = ap.parse_args()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    traces = TRACES[-1:] if a.contended_only else TRACES
    if not a.contended_only:
        st = solve_times(64, a.rounds, a.seed)
        print(f"## auction solve time, 64 apps x 512 GPUs ({int(st['jobs'])} jobs), median of {a.rounds}\n")
        print("| what | seconds |\n| --- | --- |")
        print(f"| policy.decide, f = 0.8 (13 apps bid) | {st['decide_f0.8']:.3f} |")
        print(f"| policy.decide, f = 0.01 (64 apps bid) | {st['decide_f0.01']:.3f} |")
        print(f"| auction alone, 64 apps bid | {st['auction_all_bid']:.3f} |\n")

    results: dict[tuple[int, int, int, float], tuple[list[TraceJob], Cluster, dict[str, Summary]]] = {}
    for t in traces:
        trace, cluster, how = scenario(out, *t, a.seed)
        print(how)
        results[t] = (trace, cluster, {p: run(trace, cluster, build_policy(p)) for p in POLICIES})
    print("\n## side by side: Philly-like jobs in apps (`trace synth -A`), themis / las / fifo\n")
    print("| trace | max rho | Jain rho | apps rho <= 1 | avg JCT (s) | GPU util | max rho las/themis, fifo/themis |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (jobs, napps, gpus, load), (_, _, res) in results.items():

        def col(f: Callable[[Summary], str], res: dict[str, Summary] = res) -> str:
            return " / ".join(f(res[p]) for p in POLICIES)

        print(
            f"| {jobs} jobs, {napps} apps, {gpus} GPUs, load {load} | {col(lambda s: f'{s.max_rho:.2f}')} | "
            f"{col(lambda s: f'{s.jain_rho:.3f}')} | {col(lambda s: f'{100 * s.share_rho_le_1:.0f}%')} | "
            f"{col(lambda s: f'{s.avg_jct:,.0f}')} | {col(lambda s: f'{100 * s.gpu_utilization:.1f}%')} | "
            f"{res['las'].max_rho / res['themis'].max_rho:.2f}x, {res['fifo'].max_rho / res['themis'].max_rho:.2f}x |"
        )

    trace, cluster, res = results[TRACES[-1]]
    print(f"\n## on the contended trace ({TRACES[-1][0]} jobs, {TRACES[-1][1]} apps, {TRACES[-1][2]} GPUs)\n")
    print("### f knob (fairness vs efficiency, Themis Fig. 19-like)\n")
    print("| f | max rho | Jain rho | avg JCT (s) | GPU util |\n| --- | --- | --- | --- | --- |")
    for f in (0.2, 0.5, 0.8, 0.95):
        s = res["themis"] if f == 0.8 else run(trace, cluster, build_policy("themis", PolicyParams(fairness_knob=f)))
        print(
            f"| {f}{' (default)' if f == 0.8 else ''} | {s.max_rho:.2f} | {s.jain_rho:.3f} | {s.avg_jct:,.0f} | "
            f"{100 * s.gpu_utilization:.1f}% |"
        )
    print("\n### strategy-proofness: one app reports rho x 0.5 (Themis §3.3, Fig. 18-like)\n")
    print("| app | its rho, truthful | its rho, misreporting |\n| --- | --- | --- |")
    truthful = res["themis"].app_rho
    for app in sorted(truthful, key=lambda x: -truthful[x])[:3]:
        lied = run(trace, cluster, ThemisPolicy(ConsolidatePlacement(), misreport={app: 0.5})).app_rho[app]
        print(f"| {app} | {truthful[app]:.3f} | {lied:.3f} |")
    print()


def run(trace: list[TraceJob], cluster: Cluster, pol: SchedulingPolicy) -> Summary:
    return Simulator(trace, cluster, pol, SimulationOptions(record_timeline=False, progress=False)).run().summary


def scenario(
    out: Path, jobs: int, napps: int, gpus: int, load: float, seed: int
) -> tuple[list[TraceJob], Cluster, str]:
    """The trace and cluster of one row, written to ``out``, and how to reproduce it with the CLI."""
    from teiresias.policy.gittins import ServiceDistribution

    # 8-GPU nodes; racks of 32 GPUs as in CLUSTER_YAML, one rack when smaller.
    switches, per_switch = (2, gpus // 16) if gpus >= 64 else (1, gpus // 8)
    cluster_yaml = f"num_switch: {switches}\nnum_node_p_switch: {per_switch}\nnum_gpu_p_node: 8\n"
    cluster_name = f"themis-cluster-{gpus}.yaml"
    (out / cluster_name).write_text(cluster_yaml)
    max_gpus = min(16, gpus // 2)
    dist = ServiceDistribution.from_samples_file(str(SAMPLES))
    params = PhillyParams(
        num_jobs=jobs,
        cluster_gpus=gpus,
        load=load,
        min_duration=60.0,
        max_duration=PhillyParams.max_duration,
        max_gpus=max_gpus,
    )
    trace = with_apps(philly_like(dist.samples, params, seed=seed), napps, seed)
    name = f"themis-trace-{jobs}jobs-{napps}apps-{gpus}gpus.csv"
    write_trace(out / name, trace)
    how = (
        f"reproduce ({out}): teiresias trace synth -k philly -n {jobs} -S teiresias/data/yarn-gput10000.csv "
        f"-G {gpus} -l {load} --max-gpus {max_gpus} -A {napps} -s {seed} -o {name} && "
        f"teiresias simulate -t {name} -c {cluster_name} -p {','.join(POLICIES)}"
    )
    return trace, Cluster.from_tiresias_spec(switches, per_switch, 8), how


if __name__ == "__main__":
    main()
