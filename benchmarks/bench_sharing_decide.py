"""SJF-BSBF's decision time with a deep queue, and a digest of its decisions (docs/benchmarks.md, "SJF-BSBF").

Two parts:

- ``--time`` (default): one ``policy.decide(snapshot)`` on the paper's cluster
  (16 nodes x 4 GPUs) at ``--pending`` waiting jobs, sjf-bsbf beside sjf-ffs,
  measured A B A B in one process. Two snapshots: *replay*, the round of an
  sjf-ffs replay of a Philly-like trace (etc/sharing.yaml's models, xi 1.5) whose queue first
  reaches ``--pending`` jobs; *fresh hosts*, every GPU held by a running job
  that shares with nobody (each can host a guest, so every waiting job is
  scored against all of them: the worst case). Each with the trace's
  durations (the simulator) and without (live: the lengths come from the
  GPU-time distribution).
- ``--digest``: the sjf-bsbf and sjf-ffs replays of bench_sharing.py's
  traces (seeds, xi 1.2 / 1.5 / 2.0) and of the fixed traces of
  tests/unit/test_sjf_bsbf_sim.py, hashed job record by job record (id,
  start, end, preemptions, each float's exact bits). Two trees that print the
  same digest made the same decisions. To compare with another commit, run
  the same file with that commit's tree first on the path::

    git archive b9c4356 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/bench_sharing_decide.py --digest
    .venv/bin/python benchmarks/bench_sharing_decide.py --digest

Usage::

    .venv/bin/python benchmarks/bench_sharing_decide.py [--pending 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import random
import statistics
import struct
import time
from pathlib import Path
from typing import Any

import teiresias
from teiresias.domain import Cluster, Snapshot
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.sjf_bsbf.model import SharingModel, SharingProfile
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.sharing import load_sharing_model
from teiresias.simulator.slowdown import SlowdownTable
from teiresias.simulator.synth import PhillyParams, philly_like
from teiresias.simulator.trace import TraceJob

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "teiresias" / "data" / "yarn-gput10000.csv"


def with_xi(model: SharingModel, xi: float) -> SharingModel:
    """The model with every job's and every pair's interference set to ``xi`` (bench_sharing.py's)."""
    profiles = {k: dataclasses.replace(p, interference=xi) for k, p in model.profiles.items()}
    return dataclasses.replace(
        model, profiles=profiles, default=dataclasses.replace(model.default, interference=xi), pairs={}
    )


def bench_trace(seed: int, jobs: int = 240, load: float = 2.0) -> tuple[list[TraceJob], Cluster, list[float]]:
    """bench_sharing.py's trace for ``seed``, its cluster, and the held-out GPU-time samples."""
    s = list(ServiceDistribution.from_samples_file(SAMPLES).samples)
    random.Random(seed).shuffle(s)
    draws, history = s[: len(s) // 2], s[len(s) // 2 :]
    cluster = Cluster.from_tiresias_spec(1, 16, 4)
    trace = philly_like(
        draws,
        PhillyParams(num_jobs=jobs, cluster_gpus=cluster.total_gpus, load=load, max_duration=86400.0, max_gpus=16),
        seed=seed,
    )
    return trace, cluster, history


# -- digest ---------------------------------------------------------------------


def test_traces() -> list[tuple[list[TraceJob], Cluster, SharingModel | None]]:
    """The fixed traces of tests/unit/test_sjf_bsbf_sim.py, and seeded random ones shaped like its property test."""
    c4 = Cluster.from_tiresias_spec(1, 1, 4)
    c1 = Cluster.from_tiresias_spec(1, 1, 1)
    x3 = SharingModel(default=SharingProfile(interference=3.0))
    mem = SharingModel(
        profiles={
            "h": SharingProfile(batch=32, memory_gb=8.0, fixed_memory_gb=2.0),
            "g": SharingProfile(batch=32, memory_gb=6.0, fixed_memory_gb=1.0),
        },
        gpu_memory_gb=11.0,
    )
    out: list[tuple[list[TraceJob], Cluster, SharingModel | None]] = [
        ([TraceJob(1, 4, 0.0, 1000.0), TraceJob(2, 2, 10.0, 100.0), TraceJob(3, 4, 20.0, 50.0)], c4, None),
        ([TraceJob(1, 4, 0.0, 100.0), TraceJob(2, 4, 50.0, 1000.0)], c4, x3),
        ([TraceJob(1, 1, 0.0, 100.0, "h"), TraceJob(2, 1, 1.0, 1000.0, "g")], c1, mem),
    ]
    rng = random.Random(5)
    yaml_model = load_sharing_model(ROOT / "etc" / "sharing.yaml")
    for _ in range(40):
        rows = [
            TraceJob(
                i,
                rng.choice([1, 2, 4, 8]),
                float(rng.randint(0, 300)),
                float(rng.randint(1, 400)),
                rng.choice(["vgg16", "resnet50", "other"]),
            )
            for i in range(rng.randint(1, 14))
        ]
        out.append((rows, Cluster.from_tiresias_spec(1, 2, 4), yaml_model))
    return out


def record_bytes(records: list[Any]) -> bytes:
    return b"".join(
        struct.pack("<qddq", int(r.job_id), r.start, r.end, r.preemptions)
        for r in sorted(records, key=lambda r: r.job_id)
    )


def digest(seeds: range) -> None:
    h = hashlib.sha256()
    base = load_sharing_model(ROOT / "etc" / "sharing.yaml")
    runs = 0
    for seed in seeds:
        trace, cluster, history = bench_trace(seed)
        for xi in (1.2, 1.5, 2.0):
            for name in ("sjf-ffs", "sjf-bsbf"):
                params = PolicyParams(distribution=ServiceDistribution(history), sharing=with_xi(base, xi))
                opt = SimulationOptions(interval=60.0, progress=False, record_timeline=False)
                res = Simulator(trace, cluster, build_policy(name, params), opt).run()
                h.update(record_bytes(res.records))
                runs += 1
    for trace, cluster, model in test_traces():
        for interval in (0.0, 30.0):
            for name in ("sjf-ffs", "sjf-bsbf"):
                opt = SimulationOptions(interval=interval, slowdown=SlowdownTable.none(), progress=False)
                res = Simulator(trace, cluster, build_policy(name, PolicyParams(sharing=model)), opt).run()
                h.update(record_bytes(res.records))
                runs += 1
    print(f"{runs} replays with teiresias from {Path(teiresias.__file__).parent.parent}")
    print(f"digest {h.hexdigest()}")


# -- decision time --------------------------------------------------------------


def replay_snapshot(pending: int, seed: int) -> Snapshot:
    """The first snapshot of an sjf-ffs replay (xi 1.5) with at least ``pending`` waiting jobs: twice as
    many jobs as that arriving at 40x the cluster's capacity (sjf-ffs is fast under every version,
    so the same snapshot times an old tree too)."""
    trace, cluster, history = bench_trace(seed, jobs=pending * 2, load=40.0)
    policy = build_policy(
        "sjf-ffs",
        PolicyParams(
            distribution=ServiceDistribution(history),
            sharing=with_xi(load_sharing_model(ROOT / "etc" / "sharing.yaml"), 1.5),
        ),
    )
    caught: list[Snapshot] = []

    class Stop(Exception):
        pass

    def decide(snapshot: Snapshot) -> Any:
        if sum(1 for j in snapshot.jobs if not j.is_running) >= pending:
            caught.append(snapshot)
            raise Stop
        return real(snapshot)

    real = policy.decide
    policy.decide = decide  # type: ignore[method-assign]
    try:
        Simulator(trace, cluster, policy, SimulationOptions(interval=60.0, progress=False, record_timeline=False)).run()
    except Stop:
        pass
    if not caught:
        raise SystemExit(f"the replay never had {pending} jobs waiting; raise --pending's trace load")
    return caught[0]


def fresh_hosts_snapshot(pending: int, seed: int) -> Snapshot:
    """Every GPU of 16 x 4 held by a running job alone on it (1, 2 or 4 GPUs), plus ``pending`` waiting jobs."""
    from teiresias.domain import Job, JobId, JobState, Placement

    rng = random.Random(seed)
    cluster = Cluster.from_tiresias_spec(1, 16, 4)
    models = ["vgg16", "resnet50", "bert", "yolov3", "ncf", "other"]
    jobs = []
    for node in cluster.nodes:
        free = node.gpus
        while free > 0:
            g = min(rng.choice([1, 1, 2, 4]), free)
            free -= g
            ex = rng.uniform(10, 5000)
            jobs.append(
                Job(
                    JobId(len(jobs)),
                    g,
                    0.0,
                    model_name=rng.choice(models),
                    state=JobState.RUNNING,
                    first_start_time=0.0,
                    executed_time=ex,
                    total_executed_time=ex,
                    duration=ex + rng.uniform(10, 50000),
                    placement=Placement.of({node.name: g}),
                )
            )
    for _ in range(pending):
        jobs.append(
            Job(
                JobId(len(jobs)),
                rng.choice([1] * 7 + [2, 4, 8, 16]),
                rng.uniform(0, 1000),
                model_name=rng.choice(models),
                duration=rng.uniform(10, 50000),
            )
        )
    return Snapshot(10000.0, cluster, jobs)


def blind(snapshot: Snapshot) -> Snapshot:
    """The snapshot without durations, as the live controller sees its jobs."""
    from teiresias.domain import Job

    names = [f.name for f in dataclasses.fields(Job)]
    jobs = [Job(**{**{n: getattr(j, n) for n in names}, "duration": None}) for j in snapshot.jobs]
    return dataclasses.replace(snapshot, jobs=jobs)


def timing(pending: int, rounds: int, seed: int) -> None:
    model = with_xi(load_sharing_model(ROOT / "etc" / "sharing.yaml"), 1.5)
    dist = ServiceDistribution.from_samples_file(SAMPLES)
    snaps = {"replay": replay_snapshot(pending, seed), "fresh hosts": fresh_hosts_snapshot(pending, seed)}
    print(f"decide() on 16 x 4 GPUs, median of {rounds} rounds (ms wall; CPU ms in brackets)")
    print(
        f"{'snapshot':<12} {'lengths':<13} {'waiting':>7} {'hosts':>5} {'sjf-ffs':>15} {'sjf-bsbf':>15} {'shares':>7}"
    )
    for label, snap in snaps.items():
        for lengths, s in (("durations", snap), ("distribution", blind(snap))):
            pols = {n: build_policy(n, PolicyParams(distribution=dist, sharing=model)) for n in ("sjf-ffs", "sjf-bsbf")}
            wall: dict[str, list[float]] = {n: [] for n in pols}
            cpu: dict[str, list[float]] = {n: [] for n in pols}
            shares = 0
            for _ in range(rounds):  # A B A B
                for n, pol in pols.items():
                    w, c = time.perf_counter(), time.process_time()
                    plan = pol.decide(s)
                    wall[n].append(time.perf_counter() - w)
                    cpu[n].append(time.process_time() - c)
                    if n == "sjf-bsbf":
                        shares = len(plan.sharing)
            waiting = sum(1 for j in s.jobs if not j.is_running)
            hosts = sum(1 for j in s.jobs if j.is_running and j.shared_with is None)
            cells = [f"{statistics.median(wall[n]) * 1e3:.1f} ({statistics.median(cpu[n]) * 1e3:.1f})" for n in pols]
            print(
                f"{label:<12} {lengths:<13} {waiting:>7} {hosts:>5} {cells[0]:>15} {cells[1]:>15} {shares:>7}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--digest", action="store_true", help="print the digest of the replays' job records instead")
    ap.add_argument("--seeds", type=int, default=10, help="--digest: bench_sharing.py seeds 0..N-1")
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.digest:
        digest(range(a.seeds))
    else:
        timing(a.pending, a.rounds, a.seed)


if __name__ == "__main__":
    main()
