"""HiveD comparison in the simulator: buddy cells vs plain per-tenant GPU quotas, same trace.

Cluster: 8 nodes x 8 GPUs (GPU -> 2-GPU pair -> 4-GPU socket -> 8-GPU node).
Three tenants (VCs) whose quotas add up to the whole cluster:

- prod-a: 2 nodes; trains 8-GPU jobs that need a whole node (hard affinity);
- prod-b: 3 nodes' worth; a stream of 1- and 2-GPU jobs;
- prod-c: 3 nodes' worth; 1-, 2- and 4-GPU jobs.

Each tenant submits a little beyond its quota, so opportunistic jobs exist
too. Both policies rank with the same 2D-LAS (Tiresias) and differ only in
how quotas are held: as cells (HiveD) or as GPU counts. Reported per VC:
queueing delay (time not holding GPUs: initial wait plus waits after
preemption); for the cluster: the HiveD fragmentation level (share of nodes
partly held by guaranteed jobs, sampled after every scheduling round and
time-weighted), preemptions, utilisation.

    .venv/bin/python benchmarks/hived_compare.py [--jobs 1000] [--seed 1] [--trace-out t.csv]

The plain-quota run is expected to show the sharing anomaly: prod-a is within
its quota yet waits for a whole node, because the other tenants' small
guaranteed jobs are spread over every node.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from teiresias.cells import config
from teiresias.cells.metrics import fragmentation
from teiresias.cells.quota import QuotaPolicy
from teiresias.cells.scheduler import CellsPolicy
from teiresias.domain import Cluster, Plan, Snapshot
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, TraceJob, run, write_trace

NODES = [f"gpu{i:02d}" for i in range(1, 9)]
GPN = 8

CELLS = {
    "cell_types": {
        "gpu": {},
        "pair": {"child": "gpu", "count": 2},
        "socket": {"child": "pair", "count": 2},
        "node": {"child": "socket", "count": 2, "node": True},
    },
    "physical_cells": [{"type": "node", "nodes": [n]} for n in NODES],
    "virtual_clusters": {
        "prod-a": {"accounts": ["prod-a"], "quota": {"node": 2}},
        "prod-b": {"accounts": ["prod-b"], "quota": {"node": 3}},
        "prod-c": {"accounts": ["prod-c"], "quota": {"node": 3}},
    },
}

# tenant -> (share of the offered GPU load, GPU sizes, mean duration in s). prod-a asks for
# less than its quota (2 nodes) on average; prod-b and prod-c ask for more than theirs,
# so their extra jobs run opportunistically.
MIX = {
    "prod-a": (0.14, [8], 3600.0),
    "prod-b": (0.43, [1, 1, 1, 2], 2 * 3600.0),
    "prod-c": (0.43, [1, 2, 2, 4], 2 * 3600.0),
}


def make_trace(n: int, seed: int, load: float) -> list[TraceJob]:
    """Poisson arrivals per tenant; all tenants together offer ``load`` x the cluster's GPUs."""
    rng = random.Random(seed)
    tenants = list(MIX)
    gpus = len(NODES) * GPN
    # Jobs per second per tenant so that its offered GPUs are its share of load x GPUs.
    rates = [MIX[t][0] * load * gpus / (statistics.fmean(MIX[t][1]) * MIX[t][2]) for t in tenants]
    total = sum(rates)
    t = 0.0
    jobs = []
    for i in range(n):
        t += rng.expovariate(total)
        acct = rng.choices(tenants, rates)[0]
        _, sizes, mean = MIX[acct]
        dur = max(300.0, rng.expovariate(1.0 / mean))
        jobs.append(TraceJob(i + 1, rng.choice(sizes), round(t, 1), round(dur, 1), model_name="resnet50", account=acct))
    return jobs


class Observed:
    """Measurement harness (benchmark only): records fragmentation after each round.

    Forwards ``decide`` unchanged; reads the plan's guaranteed set to know which
    jobs are high priority.
    """

    def __init__(self, policy, cluster: Cluster) -> None:
        self.policy = policy
        self.name = policy.name
        self.cap = {n.name: n.gpus for n in cluster.nodes}
        self.samples: list[tuple[float, float]] = []

    def decide(self, snapshot: Snapshot) -> Plan:
        plan = self.policy.decide(snapshot)
        high = {n: 0 for n in self.cap}
        guaranteed = plan.guaranteed  # type: ignore[attr-defined]
        by_id = {j.job_id: j for j in snapshot.jobs}
        placements = {jid: by_id[jid].placement for jid in plan.keep}
        placements.update(plan.start)
        for jid, pl in placements.items():
            if jid in guaranteed and pl is not None:
                for a in pl.allocations:
                    high[a.node] += a.gpus
        self.samples.append((snapshot.now, fragmentation(self.cap, high)))
        return plan

    def time_weighted(self, end: float) -> float:
        s = self.samples
        if not s:
            return 0.0
        total = 0.0
        for (t, f), (t2, _) in zip(s, s[1:] + [(end, 0.0)]):
            total += f * max(t2 - t, 0.0)
        span = max(end - s[0][0], 1e-9)
        return total / span


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--load", type=float, default=1.1, help="offered load x cluster GPUs")
    ap.add_argument("--policy", default="las", help="ranking inside VCs (registry name)")
    ap.add_argument("--trace-out", default=None, help="also write the trace (CSV with an account column)")
    args = ap.parse_args()

    cluster = Cluster.from_tiresias_spec(1, len(NODES), GPN, node_names=NODES)
    cfg = config.parse(CELLS, "hived_compare", cluster=cluster)
    trace = make_trace(args.jobs, args.seed, args.load)
    if args.trace_out:
        write_trace(args.trace_out, trace)
    acct = {tj.job_id: tj.account for tj in trace}
    params = PolicyParams(queues=(3600.0 * 8,))
    opts = SimulationOptions(interval=60.0, progress=False, record_timeline=False)

    results = {}
    for label, pol in [
        ("quota", QuotaPolicy(cfg, build_policy(args.policy, params))),
        ("cells", CellsPolicy(cfg, build_policy(args.policy, params), with_report=False)),
    ]:
        obs = Observed(pol, cluster)
        t0 = time.perf_counter()
        res = run(trace, cluster, obs, opts)  # type: ignore[arg-type]
        wall = time.perf_counter() - t0
        end = max(r.end for r in res.records)
        results[label] = (res, obs, end, wall)

    print(
        f"trace: {len(trace)} jobs, seed {args.seed}, load {args.load}, {len(NODES)} nodes x {GPN} GPUs, "
        f"ranking {args.policy}"
    )
    print(f"{'':8} {'VC':8} {'jobs':>5} {'avg queue (h)':>14} {'median (h)':>11} {'p95 (h)':>9} {'avg JCT (h)':>12}")
    for label, (res, _, _, _) in results.items():
        for vc in MIX:
            recs = [r for r in res.records if acct[r.job_id] == vc]
            qd = [r.queue_delay / 3600 for r in recs]
            jct = [r.jct / 3600 for r in recs]
            q = sorted(qd)
            print(
                f"{label:8} {vc:8} {len(recs):>5} {statistics.fmean(qd):>14.2f} {statistics.median(qd):>11.2f} "
                f"{q[int(0.95 * (len(q) - 1))]:>9.2f} {statistics.fmean(jct):>12.2f}"
            )
    print()
    print(
        f"{'':8} {'fragmentation (time-weighted)':>30} {'p50':>6} {'p90':>6} {'preemptions':>12} "
        f"{'GPU util':>9} {'avg JCT (h)':>12} {'wall (s)':>9}"
    )
    for label, (res, obs, end, wall) in results.items():
        fr = sorted(f for _, f in obs.samples)
        print(
            f"{label:8} {obs.time_weighted(end):>30.3f} {fr[len(fr) // 2]:>6.3f} {fr[int(0.9 * (len(fr) - 1))]:>6.3f} "
            f"{res.summary.preemptions:>12} {res.summary.gpu_utilization:>9.3f} {res.summary.avg_jct / 3600:>12.2f} "
            f"{wall:>9.1f}"
        )
    # Fragmentation over time: ten equal slices of the replay.
    print()
    print("fragmentation over time (mean per tenth of the replay):")
    for label, (_res, obs, end, _) in results.items():
        t0 = obs.samples[0][0]
        cells = []
        for k in range(10):
            lo, hi = t0 + (end - t0) * k / 10, t0 + (end - t0) * (k + 1) / 10
            xs = [f for t, f in obs.samples if lo <= t < hi]
            cells.append(f"{statistics.fmean(xs):.2f}" if xs else "  - ")
        print(f"  {label:8} " + " ".join(cells))


if __name__ == "__main__":
    main()
