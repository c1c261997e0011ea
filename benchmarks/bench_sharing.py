"""SJF-BSBF side by side: sjf-bsbf, sjf-ffs, sjf, srsf, las, gittins on one Philly-like trace.

Prints one table (nothing is asserted); docs/benchmarks.md ("SJF-BSBF")
records the figures with their command line.

The trace is Philly-like (``teiresias trace synth -k philly``): GPU-time from
Microsoft's public Philly samples (teiresias/data/ATTRIBUTION.txt), Poisson
arrivals at the offered load, jobs capped at one day. The paper's cluster
has 16 nodes x 4 GPUs.

The sharing rows run once per interference ratio xi, which is the same for
every job and every pair (the paper's Fig. 6(b) sweep). Memory comes from
etc/sharing.yaml's footprints on 11 GB GPUs. gittins learns from the
held-out half of the samples; sjf-bsbf and sjf-ffs read the trace's
durations, as in the paper.

    .venv/bin/python benchmarks/bench_sharing.py                       # ~1 min CPU
    .venv/bin/python benchmarks/bench_sharing.py --jobs 480 --xi 1.0,1.5,2.0,3.0
    .venv/bin/python benchmarks/bench_sharing.py --seeds 10            # the seed spread, ~3 min CPU
    .venv/bin/python benchmarks/bench_sharing.py --search 10           # hyper-parameter searches

``--seeds N`` replays seeds 0..N-1 (a trace each) under sjf-ffs, sjf-bsbf and
sjf-bsbf without sharing (xi 1000: Theorem 1 never shares, i.e. non-preemptive
SJF) at each xi and prints each seed's average JCT and the spread. ``--search
N`` does the same on N seeded traces of hyper-parameter searches (5 searches
of 8-20 trials of 600-3,600 s, submitted 5 s apart, the searches up to 3,000 s
apart) on 16 GPUs, with etc/sharing.yaml's xi and with xi 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from pathlib import Path

from teiresias.domain import Cluster
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.sharing import load_sharing_model
from teiresias.simulator.synth import PhillyParams, philly_like
from teiresias.simulator.trace import TraceJob

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "teiresias" / "data" / "yarn-gput10000.csv"


def with_xi(model, xi: float):
    """The model with every job's and every pair's interference set to ``xi``."""
    profiles = {k: dataclasses.replace(p, interference=xi) for k, p in model.profiles.items()}
    return dataclasses.replace(
        model, profiles=profiles, default=dataclasses.replace(model.default, interference=xi), pairs={}
    )


NEVER = 1000.0  # an xi at which Theorem 1 never shares: sjf-bsbf is then non-preemptive SJF


def bench_trace(seed: int, jobs: int, load: float, nodes: int) -> tuple[list[TraceJob], Cluster, list[float]]:
    """The Philly-like trace of ``seed``, its cluster, and the held-out GPU-time samples."""
    s = list(ServiceDistribution.from_samples_file(SAMPLES).samples)
    random.Random(seed).shuffle(s)
    draws, history = s[: len(s) // 2], s[len(s) // 2 :]
    cluster = Cluster.from_tiresias_spec(1, nodes, 4)
    trace = philly_like(
        draws,
        PhillyParams(num_jobs=jobs, cluster_gpus=cluster.total_gpus, load=load, max_duration=86400.0, max_gpus=16),
        seed=seed,
    )
    return trace, cluster, history


def three(trace: list[TraceJob], cluster: Cluster, history: list[float] | None, model) -> dict[str, float]:
    """Average JCT of sjf-ffs, sjf-bsbf and no sharing on one trace."""
    out = {}
    for label, name, m in (
        ("sjf-ffs", "sjf-ffs", model),
        ("sjf-bsbf", "sjf-bsbf", model),
        ("no sharing", "sjf-bsbf", with_xi(model, NEVER)),
    ):
        params = PolicyParams(distribution=ServiceDistribution(history) if history else None, sharing=m)
        opt = SimulationOptions(interval=60.0, progress=False, record_timeline=False)
        out[label] = Simulator(trace, cluster, build_policy(name, params), opt).run().summary.avg_jct
    return out


def report(rows: dict[str, list[dict[str, float]]]) -> None:
    """Per setting: sjf-bsbf against sjf-ffs and against no sharing, mean / best / worst over the traces."""
    print(
        f"\n{'setting':<10} {'bsbf vs ffs: mean':>18} {'best':>7} {'worst':>7} {'bsbf vs none: mean':>19} {'worst':>7}"
    )
    for setting, runs in rows.items():
        ffs = [r["sjf-bsbf"] / r["sjf-ffs"] - 1 for r in runs]
        none = [r["sjf-bsbf"] / r["no sharing"] - 1 for r in runs]
        print(
            f"{setting:<10} {statistics.mean(ffs):>+18.1%} {min(ffs):>+7.1%} {max(ffs):>+7.1%}"
            f" {statistics.mean(none):>+19.1%} {max(none):>+7.1%}"
        )


def spread(a: argparse.Namespace) -> None:
    base_model = load_sharing_model(ROOT / "etc" / "sharing.yaml")
    print(f"{a.jobs} Philly-like jobs, load {a.load:g}, on {a.nodes * 4} GPUs, interval 60 s; avg JCT (s)")
    print(f"{'xi':>4} {'seed':>4} {'sjf-ffs':>9} {'sjf-bsbf':>9} {'no sharing':>10} {'bsbf/ffs':>9}")
    rows: dict[str, list[dict[str, float]]] = {}
    for x in (float(v) for v in a.xi.split(",")):
        for seed in range(a.seeds):
            trace, cluster, history = bench_trace(seed, a.jobs, a.load, a.nodes)
            r = three(trace, cluster, history, with_xi(base_model, x))
            rows.setdefault(f"xi {x:g}", []).append(r)
            print(
                f"{x:>4g} {seed:>4} {r['sjf-ffs']:>9.0f} {r['sjf-bsbf']:>9.0f} {r['no sharing']:>10.0f}"
                f" {r['sjf-bsbf'] / r['sjf-ffs'] - 1:>+9.1%}",
                flush=True,
            )
    report(rows)


def search_trace(seed: int) -> list[TraceJob]:
    """Five hyper-parameter searches: 8-20 trials each (1 GPU, sometimes 2) of 600-3,600 s of one
    model, submitted 5 s apart; a search starts up to 3,000 s after the previous one."""
    rng = random.Random(seed)
    trace: list[TraceJob] = []
    t = 0.0
    for _ in range(5):
        n = rng.randint(8, 20)
        model = rng.choice(["resnet50", "inception3", "default"])
        for k in range(n):
            trace.append(
                TraceJob(len(trace), rng.choice([1, 1, 1, 2]), t + 5 * k, float(rng.randint(600, 3600)), model)
            )
        t += rng.uniform(0, 3000)
    return trace


def searches(n: int) -> None:
    base_model = load_sharing_model(ROOT / "etc" / "sharing.yaml")
    cluster = Cluster.from_tiresias_spec(1, 4, 4)
    print("hyper-parameter searches on 16 GPUs, interval 60 s; avg JCT (s)")
    print(f"{'xi':>10} {'seed':>4} {'jobs':>4} {'sjf-ffs':>9} {'sjf-bsbf':>9} {'no sharing':>10}")
    rows: dict[str, list[dict[str, float]]] = {}
    for label, model in (("sharing.yaml", base_model), ("2", with_xi(base_model, 2.0))):
        for seed in range(n):
            trace = search_trace(seed)
            r = three(trace, cluster, None, model)
            rows.setdefault(f"xi {label}"[:10], []).append(r)
            print(
                f"{label:>10} {seed:>4} {len(trace):>4} {r['sjf-ffs']:>9.0f} {r['sjf-bsbf']:>9.0f}"
                f" {r['no sharing']:>10.0f}",
                flush=True,
            )
    report(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=240)
    ap.add_argument("--load", type=float, default=2.0, help="offered load (1 = the cluster's capacity)")
    ap.add_argument("--nodes", type=int, default=16, help="nodes of 4 GPUs [16: the paper's 64 GPUs]")
    ap.add_argument("--xi", default="1.2,1.5,2.0", help="interference ratios for the sharing rows")
    ap.add_argument("--baselines", default="sjf,srsf,las,gittins")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=0, help="the seed spread: seeds 0..N-1 (see above)")
    ap.add_argument("--search", type=int, default=0, help="N traces of hyper-parameter searches (see above)")
    a = ap.parse_args()
    if a.seeds:
        spread(a)
        return
    if a.search:
        searches(a.search)
        return

    s = list(ServiceDistribution.from_samples_file(SAMPLES).samples)
    random.Random(a.seed).shuffle(s)
    draws, history = s[: len(s) // 2], s[len(s) // 2 :]
    cluster = Cluster.from_tiresias_spec(1, a.nodes, 4)
    trace = philly_like(
        draws,
        PhillyParams(num_jobs=a.jobs, cluster_gpus=cluster.total_gpus, load=a.load, max_duration=86400.0, max_gpus=16),
        seed=a.seed,
    )
    base_model = load_sharing_model(ROOT / "etc" / "sharing.yaml")
    print(f"{a.jobs} Philly-like jobs, load {a.load:g}, on {cluster.total_gpus} GPUs, interval 60 s")
    print(
        f"{'policy':<9} {'xi':>4} {'avg JCT':>9} {'median':>8} {'p95':>9} {'avg queue':>9} {'vs las':>7} "
        f"{'slowed':>6} {'CPU s':>6}"
    )
    rows: list[tuple[str, float | None]] = [(n, None) for n in a.baselines.split(",") if n]
    rows += [(n, float(x)) for x in a.xi.split(",") for n in ("sjf-ffs", "sjf-bsbf")]
    las = None
    for name, xi in rows:
        params = PolicyParams(
            distribution=ServiceDistribution(history), sharing=with_xi(base_model, xi) if xi is not None else None
        )
        opt = SimulationOptions(interval=60.0, progress=False, record_timeline=False)
        c = time.process_time()
        sim = Simulator(trace, cluster, build_policy(name, params), opt)
        res = sim.run()
        cpu = time.process_time() - c
        m = res.summary
        if name == "las":
            las = m.avg_jct
        # Jobs that ran longer than alone: both sides of every pair (a guest, or a host that had one).
        shared = sum(1 for r in res.records if r.end - r.start > r.work + 1e-6) if xi is not None else 0
        print(
            f"{name:<9} {'-' if xi is None else f'{xi:g}':>4} {m.avg_jct:>9.0f} {m.median_jct:>8.0f} "
            f"{m.p95_jct:>9.0f} {m.avg_queue_delay:>9.0f} {(f'{m.avg_jct / las:.2f}x' if las else '-'):>7} "
            f"{shared:>6} {cpu:>6.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
