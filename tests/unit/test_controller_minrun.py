"""Minimum run times and lost work (issue 20 B12): the rule (teiresias.policy.protect)
in the allocation walk and the simulator, and the controller on the in-memory Slurm
double (tests/unit/slurm_double.py; the live form is in
tests/slurm/test_controller_defects_live.py)."""

from __future__ import annotations

import math
from pathlib import Path

from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog, read_audit
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.state import StateStore
from teiresias.domain import Cluster
from teiresias.policy.protect import MinRun, protected_until
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import cluster, pending, running, snap
from teiresias.simulator.engine import SimulationOptions, Simulator
from teiresias.simulator.trace import TraceJob
from tests.unit.slurm_double import InMemorySlurm


def test_the_rule() -> None:
    rule = MinRun(30.0, math.inf)
    assert protected_until(100.0, True, rule) == 130.0 and protected_until(100.0, False, rule) == math.inf
    assert protected_until(None, True, rule) is None and protected_until(100.0, True, MinRun()) is None


def test_the_walk_keeps_a_protected_job_and_preempts_the_next_one() -> None:
    las = build_policy("las", PolicyParams(queues=(100.0,)))
    q2 = dict(executed_time=200.0, first_start_time=0.0)
    young = running(1, 4, {"s0n0": 4}, submit=5.0, protected_until=130.0, **q2)  # ranks below job 2
    old = running(2, 4, {"s0n1": 4}, submit=0.0, **q2)
    plan = las.decide(snap(cluster(2, 4), young, old, pending(3, 4, submit=10.0), now=120.0))
    assert plan.preempt == (2,) and 1 in plan.keep and plan.start[3].nodes == ("s0n1",)
    plan = las.decide(snap(cluster(2, 4), young, old, pending(3, 4, submit=10.0), now=131.0))
    assert plan.preempt == (1,)  # its protection is over: the lowest-ranked goes


def test_the_simulator_loses_a_plain_jobs_work_and_protects_it() -> None:
    c = Cluster.from_tiresias_spec(1, 1, 4)
    trace = [TraceJob(1, 4, 0.0, 1000.0), TraceJob(2, 4, 500.0, 100.0)]
    pol = build_policy("las", PolicyParams(queues=(1000.0,)))  # job 1 in Q2 at 250 s, job 2 never

    def run(rule: MinRun) -> tuple[dict[int, float], float]:
        sim = Simulator(trace, c, pol, SimulationOptions(interval=10.0, min_run=rule, plain_jobs=frozenset({1})))
        return {r.job_id: r.jct for r in sim.run().records}, sim.lost_gpu_seconds

    jct, lost = run(MinRun())  # preempted at 500 s: its 500 s of work are gone
    assert lost == 4 * 500.0 and jct == {1: 1600.0, 2: 100.0}
    jct, lost = run(MinRun(0.0, math.inf))  # never preempted once started
    assert lost == 0.0 and jct == {1: 1000.0, 2: 600.0}


def controller(tmp_path: Path, slurm: InMemorySlurm, **pre: float) -> Controller:
    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "las", "queues": [10]},
            "preemption": {"grace_seconds": 5, **pre},
        }
    )
    return Controller(cfg, slurm, StateStore(cfg.state_db), AuditLog(cfg.audit_log))


def test_defaults_a_plain_job_is_not_preempted_and_a_checkpointing_one_after_30_s(tmp_path: Path) -> None:
    slurm = InMemorySlurm({"node1": 4, "node2": 4})
    ctl = controller(tmp_path, slurm)
    slurm.submit(1, 4, now=100.0)  # plain sbatch
    slurm.submit(2, 4, now=100.0, script="#!/bin/sh\n#SBATCH --signal=B:USR1@60\nsleep 60\n")  # checkpoints itself
    ctl.round(now=100.0)
    assert slurm.schedule(100.5) == [1, 2]
    slurm.submit(3, 4, now=110.0)
    slurm.submit(4, 4, now=110.0)
    assert ctl.round(now=120.0).actions == []  # both in Q2, both protected (20 s into their runs)
    acts = [(a.job, a.action) for a in ctl.round(now=131.0).actions]
    assert acts == [(2, "signal")]  # 30 s on: the one that checkpoints; the plain job never
    assert "wait" in ctl.store.job(4).reason


def test_lost_work_is_counted_in_the_record_and_the_audit_log(tmp_path: Path) -> None:
    slurm = InMemorySlurm({"node1": 4})
    ctl = controller(tmp_path, slurm, min_run_seconds=0, plain_min_run_seconds=0)
    slurm.submit(1, 4, now=100.0)
    ctl.round(now=100.0)
    assert slurm.schedule(100.0) == [1]
    slurm.submit(2, 4, now=130.0)
    r = ctl.round(now=140.0)  # 40 s of a plain job's work: 160 GPU-s lost
    assert [(a.job, a.action) for a in r.actions] == [(1, "requeue"), (2, "start")]
    assert ctl.store.job(1).lost_gpu_seconds == 160.0
    (line,) = [e for e in read_audit(tmp_path / "a.jsonl") if e["job"] == 1 and e["action"] == "requeue"]
    assert line["lost_gpu_seconds"] == 160.0 and line["acked"] is False
