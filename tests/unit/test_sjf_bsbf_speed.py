"""SJF-BSBF's decision time with a deep queue (issue 22 item 3; docs/sjf-bsbf.md "Decision time").

The fast round (each host scored against a model's guests only until it refuses one, shortest
first) must decide exactly what the plain round decides (every host scored against every
waiting job): the same starts, pairs, settings and reasons, on random rounds. And a round at
1,000 waiting jobs takes milliseconds, where it took seconds without durations.
"""

from __future__ import annotations

import importlib.util
import random
import statistics
import time

import pytest

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.placement import ConsolidatePlacement, SpreadPlacement
from teiresias.policy.sjf_bsbf import SharingModel, SharingProfile, SjfBsbfPolicy, SjfFfsPolicy
from teiresias.simulator.sharing import load_sharing_model
from tests.conftest import REPO

MODELS = ["vgg16", "resnet50", "bert", "other", "h", "g"]


def random_round(rng: random.Random, pending: int, durations: bool) -> Snapshot:
    """A full cluster of running jobs (some paired, some with a sub-batch) and ``pending`` waiting jobs.
    Lengths are drawn from a few values so that equal lengths (ties) are common."""
    nodes = rng.choice([2, 4, 8])
    cluster = Cluster.from_tiresias_spec(1, nodes, rng.choice([1, 2, 4]))
    jobs: list[Job] = []
    lengths = [50.0, 100.0, 100.0, 300.0, 1000.0, 5000.0]
    for node in cluster.nodes:
        free = node.gpus
        while free > 0 and rng.random() < 0.9:
            g = min(rng.choice([1, 1, 2, 4]), free)
            free -= g
            done = rng.choice([0.0, 10.0, 60.0, 500.0])
            jobs.append(
                Job(
                    JobId(len(jobs)),
                    g,
                    0.0,
                    model_name=rng.choice(MODELS),
                    state=JobState.RUNNING,
                    first_start_time=0.0,
                    executed_time=done,
                    total_executed_time=done,
                    duration=done + rng.choice(lengths) if durations else None,
                    placement=Placement.of({node.name: g}),
                    sub_batch=rng.choice([None, None, 8]),
                )
            )
    # Pair some neighbours (a paired job hosts nobody).
    for a, b in zip(jobs[::4], jobs[1::4], strict=False):
        a.shared_with, b.shared_with = b.job_id, a.job_id
    for _ in range(pending):
        jobs.append(
            Job(
                JobId(len(jobs)),
                rng.choice([1, 1, 1, 2, 4, 8]),
                float(rng.randint(0, 50)),
                model_name=rng.choice(MODELS),
                duration=rng.choice(lengths) * rng.choice([1.0, 1.0, 1.5]) if durations else None,
            )
        )
    return Snapshot(100.0, cluster, jobs)


def model_for(rng: random.Random) -> SharingModel:
    xi = rng.choice([1.2, 1.5, 2.0, 3.0])
    return rng.choice(
        [
            SharingModel(default=SharingProfile(interference=xi)),
            load_sharing_model("etc/sharing.yaml"),
            SharingModel(
                profiles={
                    "h": SharingProfile(batch=32, memory_gb=8.0, fixed_memory_gb=2.0, interference=xi),
                    "g": SharingProfile(batch=32, memory_gb=6.0, fixed_memory_gb=1.0, interference=1.2),
                },
                pairs={("vgg16", "bert"): (2.5, 1.1)},
                default=SharingProfile(batch=16, memory_gb=5.0, fixed_memory_gb=2.0, interference=xi),
                gpu_memory_gb=11.0,
            ),
        ]
    )


@pytest.mark.parametrize("cls", [SjfBsbfPolicy, SjfFfsPolicy])
def test_the_fast_round_decides_what_scoring_every_pair_decides(cls) -> None:
    dist = ServiceDistribution.from_values([30.0, 100.0, 100.0, 700.0, 2000.0, 9000.0])
    rng = random.Random(22)
    compared = shared = 0
    for _ in range(150):
        durations = rng.random() < 0.6
        snap = random_round(rng, rng.choice([3, 20, 80]), durations)
        model = model_for(rng)
        placement = rng.choice([ConsolidatePlacement(), SpreadPlacement()])
        fast = cls(placement, model, dist).decide(snap)
        plain = cls(placement, model, dist, exhaustive=True).decide(snap)
        assert fast.start == plain.start
        assert fast.sharing == plain.sharing
        assert fast.reasons == plain.reasons
        assert fast.order == plain.order
        compared += 1
        shared += len(fast.sharing)
    assert shared > 100, "the rounds must exercise sharing"


def test_a_round_at_a_thousand_waiting_jobs_without_durations_takes_milliseconds() -> None:
    """Live (no durations: lengths from the GPU-time distribution), 1,000 waiting jobs beside a
    full 16 x 4 cluster of jobs that can each host one: the worst round of
    benchmarks/bench_sharing_decide.py. b9c4356 took ~6-13 s of CPU per round here (each
    length re-read the 10,000 samples, once per host and guest); now ~15 ms."""
    spec = importlib.util.spec_from_file_location(
        "bench_sharing_decide", REPO / "benchmarks" / "bench_sharing_decide.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    snap = bench.blind(bench.fresh_hosts_snapshot(1000, 1))
    dist = ServiceDistribution.from_samples_file(REPO / "teiresias" / "data" / "yarn-gput10000.csv")
    pol = SjfBsbfPolicy(ConsolidatePlacement(), load_sharing_model(REPO / "etc" / "sharing.yaml"), dist)
    cpu = []
    for _ in range(3):
        t = time.process_time()
        plan = pol.decide(snap)
        cpu.append(time.process_time() - t)
    assert plan.sharing, "some waiting jobs share"
    # ~15x the ~15 ms measured: room for a loaded machine, 25x under b9c4356.
    assert statistics.median(cpu) < 0.25, f"one round took {statistics.median(cpu):.3f} s of CPU"
