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
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from pathlib import Path

from teiresias.domain import Cluster
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.sharing import load_sharing_model
from teiresias.simulator.synth import PhillyParams, philly_like

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "teiresias" / "data" / "yarn-gput10000.csv"


def with_xi(model, xi: float):
    """The model with every job's and every pair's interference set to ``xi``."""
    profiles = {k: dataclasses.replace(p, interference=xi) for k, p in model.profiles.items()}
    return dataclasses.replace(
        model, profiles=profiles, default=dataclasses.replace(model.default, interference=xi), pairs={}
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=240)
    ap.add_argument("--load", type=float, default=2.0, help="offered load (1 = the cluster's capacity)")
    ap.add_argument("--nodes", type=int, default=16, help="nodes of 4 GPUs [16: the paper's 64 GPUs]")
    ap.add_argument("--xi", default="1.2,1.5,2.0", help="interference ratios for the sharing rows")
    ap.add_argument("--baselines", default="sjf,srsf,las,gittins")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

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
