"""Buddy cells: allocation and release time on a 1,024-node, 8,192-GPU hierarchy.

Hierarchy: GPU -> 2-GPU pair -> 4-GPU socket -> 8-GPU node -> rack of 8 nodes
(128 racks). Four VCs split the whole cluster (32 racks' worth each, in racks,
nodes and sockets). Measures, per operation:

- physical buddy allocate / release of random-level cells (split and merge);
- guaranteed VC allocate / release (buddy inside the VC, lazy binding to
  physical cells, preemption cost with opportunistic jobs present);
- one CellsPolicy round (``decide``) with a few thousand jobs, for scale.

Goal (issue 6): well under 1 ms per allocate / release.

    .venv/bin/python benchmarks/bench_cells.py [--ops 20000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from teiresias.cells import config
from teiresias.cells.buddy import BuddySpace
from teiresias.cells.preempt import Occupancy, victims
from teiresias.cells.scheduler import CellsPolicy
from teiresias.cells.vc import VirtualCluster
from teiresias.domain import Cluster, Job, JobId, JobState, Snapshot
from teiresias.policy.registry import PolicyParams, build_policy

RACKS = 128
NODES_PER_RACK = 8


def big_config() -> config.CellsConfig:
    raw = {
        "cell_types": {
            "gpu": {},
            "pair": {"child": "gpu", "count": 2},
            "socket": {"child": "pair", "count": 2},
            "node": {"child": "socket", "count": 2, "node": True},
            "rack": {"child": "node", "count": NODES_PER_RACK},
        },
        "physical_cells": [{"type": "rack", "nodes": f"r{r:03d}n[0-{NODES_PER_RACK - 1}]"} for r in range(RACKS)],
        # 32 racks' worth per VC, at several levels (feasible: 4 x 32 = 128 racks).
        "virtual_clusters": {
            f"vc{k}": {"accounts": [f"acct{k}"], "quota": {"rack": 24, "node": 56, "socket": 16}} for k in range(4)
        },
    }
    return config.parse(raw, "bench")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(int(q * len(xs)), len(xs) - 1)]


def show(name: str, xs: list[float]) -> None:
    us = [x * 1e6 for x in xs]
    print(
        f"  {name:<34} n={len(us):>6}  mean {statistics.fmean(us):7.1f} us  "
        f"p50 {pct(us, 0.5):7.1f} us  p99 {pct(us, 0.99):7.1f} us  max {max(us):8.1f} us"
    )


def bench_physical(cfg: config.CellsConfig, ops: int, rng: random.Random) -> None:
    topo = cfg.topology()
    space = BuddySpace(topo.roots)
    levels = [1, 1, 1, 2, 2, 3, 4, 4, 5]
    held = []
    t_alloc: list[float] = []
    t_release: list[float] = []
    for _ in range(ops):
        if held and (rng.random() < 0.5 or len(held) > 2000):
            c = held.pop(rng.randrange(len(held)))
            t0 = time.perf_counter()
            space.release(c)
            t_release.append(time.perf_counter() - t0)
        else:
            lv = rng.choice(levels)
            t0 = time.perf_counter()
            c = space.alloc("rack", lv)
            t_alloc.append(time.perf_counter() - t0)
            if c is not None:
                held.append(c)
    for c in held:
        space.release(c)
    assert space.snapshot() == BuddySpace(topo.roots).snapshot(), "release did not merge back"
    show("physical alloc (split)", t_alloc)
    show("physical release (merge)", t_release)


def bench_vc(cfg: config.CellsConfig, ops: int, rng: random.Random) -> None:
    topo = cfg.topology()
    physical = BuddySpace(topo.roots)
    vcs = [VirtualCluster(s, dict(cfg.chains), frozenset(), topo.node_cells) for s in cfg.vcs]
    occ = Occupancy()
    # Opportunistic jobs on 1 GPU of every 4th node: guaranteed choices pay the cost function.
    for i, nc in enumerate(topo.node_cells.values()):
        if i % 4 == 0:
            occ.occupy(JobId(10**6 + i), [next(nc.leaves())], opportunistic=True)
    levels = [1, 2, 3, 4, 4, 5]
    held = []
    t_alloc: list[float] = []
    t_release: list[float] = []
    next_id = 1
    for _ in range(ops):
        if held and (rng.random() < 0.5 or len(held) > 1500):
            vc, c, j = held.pop(rng.randrange(len(held)))
            t0 = time.perf_counter()
            occ.vacate(j)
            vc.release(c, physical)
            t_release.append(time.perf_counter() - t0)
        else:
            vc = rng.choice(vcs)
            lv = rng.choice(levels)
            if not vc.can_fit("rack", lv):
                continue
            t0 = time.perf_counter()
            c = vc.alloc("rack", lv, physical, occ.cost)
            assert c is not None, "safety: a request inside the quota failed"
            for v in victims(occ, [c]):
                occ.vacate(v)
            occ.occupy(JobId(next_id), [c], opportunistic=False)
            t_alloc.append(time.perf_counter() - t0)
            held.append((vc, c, JobId(next_id)))
            next_id += 1
    show("guaranteed VC alloc (bind+preempt)", t_alloc)
    show("guaranteed VC release (unbind)", t_release)


def bench_round(cfg: config.CellsConfig, rng: random.Random, jobs: int) -> None:
    names = [n for t in cfg.tops for n in t.nodes]
    cluster = Cluster.from_tiresias_spec(RACKS, NODES_PER_RACK, 8, node_names=names)
    policy = CellsPolicy(cfg, build_policy("las", PolicyParams(queues=(3600.0,))))
    pending = [
        Job(JobId(i), rng.choice([1, 1, 2, 4, 8, 8, 16, 32]), float(i), account=f"acct{rng.randrange(5)}")
        for i in range(jobs)
    ]
    t0 = time.perf_counter()
    plan = policy.decide(Snapshot(0.0, cluster, pending))
    dt1 = time.perf_counter() - t0
    print(f"  policy round 1: {jobs} pending jobs, 8192 GPUs: {dt1 * 1e3:.0f} ms (started {len(plan.start)})")
    # Second round: the started jobs run; the rest still wait.
    state = []
    for j in pending:
        if j.job_id in plan.start:
            state.append(
                Job(
                    j.job_id,
                    j.num_gpus,
                    j.submit_time,
                    account=j.account,
                    state=JobState.RUNNING,
                    placement=plan.start[j.job_id],
                    first_start_time=1.0,
                    executed_time=50.0,
                    total_executed_time=50.0,
                )
            )
        else:
            state.append(j)
    snap = Snapshot(60.0, cluster, state)
    t0 = time.perf_counter()
    plan2 = policy.decide_cells(snap, plan.cells)
    dt = time.perf_counter() - t0
    print(
        f"  policy round 2: {jobs} jobs ({len(plan.start)} running), 8192 GPUs: {dt * 1e3:.0f} ms "
        f"(started {len(plan2.start)}, kept {len(plan2.keep)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    cfg = big_config()
    topo = cfg.topology()
    print(
        f"hierarchy: {len(topo.node_cells)} nodes, {topo.total_gpus} GPUs, {len(topo.cells)} cells "
        f"(config + tree built in {(time.perf_counter() - t0) * 1e3:.0f} ms)"
    )
    bench_physical(cfg, args.ops, rng)
    bench_vc(cfg, args.ops, rng)
    bench_round(cfg, rng, args.jobs)


if __name__ == "__main__":
    main()
