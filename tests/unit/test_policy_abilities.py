"""The owner's treatment follows the abilities a policy declares (teiresias/policy/base.py:
``Leases``, ``Slices``), never the policy's name: a policy defined here, under a name of its own,
gets the leases and the mechanism state that themis and gandiva get, in the simulator and in
the controller alike; the same policy without the declaration gets neither.

The controller's rounds run on the in-memory Slurm double (tests/unit/slurm_double.py): fast
unit tests BESIDE the live ones on a real Slurm (tests/slurm/test_themis_live.py,
tests/slurm/test_gandiva_live.py), which run themis and gandiva through the same code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_plugin.config import parse_config
from slurm_plugin.controller import leases, slicing
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.state import StateStore
from teiresias.domain import Cluster, Job, JobId, Placement, Plan, Snapshot
from teiresias.policy.base import grants_leases, uses_slices
from teiresias.policy.registry import build_policy
from teiresias.simulator import SimulationOptions, Simulator, SlowdownTable, TraceJob
from tests.unit.slurm_double import InMemorySlurm

LEASE = 100.0


class FirstFit:
    """Starts pending jobs in submission order on the first node with room, never preempts,
    grants each running job a lease of LEASE seconds from its start, and records what each
    round's snapshot says about the running jobs."""

    name = "first-fit-abilities"  # neither themis nor gandiva
    preemptive = False

    def __init__(self, *, leases: bool = False, slices: bool = False) -> None:
        self.leases = leases
        self.slices = slices
        self.seen: list[dict[int, Job]] = []  # per round: running job id -> the job as shown

    def decide(self, snapshot: Snapshot) -> Plan:
        running = [j for j in snapshot.jobs if j.is_running]
        self.seen.append({int(j.job_id): j for j in running})
        free = dict(snapshot.free_gpus())
        start: dict[JobId, Placement] = {}
        for j in sorted((j for j in snapshot.jobs if not j.is_running), key=lambda j: (j.submit_time, j.job_id)):
            node = next((n for n, g in free.items() if g >= j.num_gpus), None)
            if node is not None:
                free[node] -= j.num_gpus
                start[j.job_id] = Placement.of({node: j.num_gpus})
        granted = {j.job_id: j.lease_end if j.lease_end is not None else snapshot.now + LEASE for j in running}
        granted.update({jid: snapshot.now + LEASE for jid in start})
        return Plan(
            start=start,
            keep=tuple(j.job_id for j in running),
            queues={j.job_id: 0 for j in snapshot.jobs},
            order=tuple(j.job_id for j in snapshot.jobs),
            leases=granted,
        )


def test_the_helpers_read_the_declarations_and_themis_and_gandiva_declare_theirs():
    assert grants_leases(FirstFit(leases=True)) and not grants_leases(FirstFit())
    assert uses_slices(FirstFit(slices=True)) and not uses_slices(FirstFit())
    assert grants_leases(build_policy("themis")) and not uses_slices(build_policy("themis"))
    assert uses_slices(build_policy("gandiva")) and not grants_leases(build_policy("gandiva"))
    assert not grants_leases(build_policy("las")) and not uses_slices(build_policy("las"))


# ------------------------------------------------------------------- simulator
def simulate(policy: FirstFit) -> None:
    # Two 1-GPU jobs on one GPU: job 2 waits, so rounds tick while job 1 runs.
    trace = [TraceJob(1, 1, 0, 50), TraceJob(2, 1, 0, 50)]
    opt = SimulationOptions(interval=10.0, slowdown=SlowdownTable.none(), progress=False)
    Simulator(trace, Cluster.from_tiresias_spec(1, 1, 1), policy, opt).run()  # type: ignore[arg-type]


@pytest.mark.parametrize("declared", [True, False])
def test_the_simulator_hands_a_declared_policys_leases_back_on_the_jobs(declared):
    policy = FirstFit(leases=declared)
    simulate(policy)
    shown = [r[1].lease_end for r in policy.seen if 1 in r]
    assert len(shown) >= 3  # job 1 was seen running in several rounds
    assert shown == ([0.0 + LEASE] * len(shown) if declared else [None] * len(shown))


@pytest.mark.parametrize("declared", [True, False])
def test_the_simulator_runs_its_mechanisms_for_a_policy_that_declares_slices(declared):
    policy = FirstFit(slices=declared)
    simulate(policy)
    shown = [r[1].slice_since for r in policy.seen if 1 in r]
    assert shown  # job 1 was seen running
    # The mechanisms stamp a start on the job (Mechanisms.started); without them nothing does.
    assert shown == ([0.0] * len(shown) if declared else [None] * len(shown))


# ------------------------------------------------------------------- controller
def controller(tmp_path: Path, slurm: InMemorySlurm, policy: FirstFit) -> Controller:
    cfg = parse_config(
        {"state_db": str(tmp_path / "s.db"), "audit_log": str(tmp_path / "a.jsonl"), "policy": {"name": "fifo"}}
    )
    return Controller(
        cfg, slurm, StateStore(cfg.state_db), AuditLog(cfg.audit_log), policy_factory=lambda _cfg, _dist: policy
    )


def two_rounds(tmp_path: Path, policy: FirstFit) -> Controller:
    """Round 1 starts job 1 (Slurm runs it), round 2 sees it running."""
    slurm = InMemorySlurm({"node1": 1})
    slurm.submit(1, 1, now=100.0)
    ctl = controller(tmp_path, slurm, policy)
    slurm.clock = 200.0
    assert list(ctl.round(now=200.0).plan.start) == [1]
    assert slurm.schedule(201.0) == [1]
    slurm.clock = 210.0
    ctl.round(now=210.0)
    return ctl


@pytest.mark.parametrize("declared", [True, False])
def test_the_controller_stores_and_hands_back_a_declared_policys_leases(tmp_path, declared):
    policy = FirstFit(leases=declared)
    ctl = two_rounds(tmp_path, policy)
    assert policy.seen[-1][1].lease_end == (200.0 + LEASE if declared else None)
    stored = ctl.store.get_meta(leases.META_KEY)
    if declared:
        assert stored is not None and json.loads(stored)["leases"] == {"1": 200.0 + LEASE}
    else:
        assert stored is None


@pytest.mark.parametrize("declared", [True, False])
def test_the_controller_keeps_mechanism_state_for_a_policy_that_declares_slices(tmp_path, declared):
    policy = FirstFit(slices=declared)
    ctl = two_rounds(tmp_path, policy)
    assert (ctl.slicer is not None) == declared
    # The Slicer began job 1's first slice when round 1 started it, and put it on the job.
    assert policy.seen[-1][1].slice_since == (200.0 if declared else None)
    stored = ctl.store.get_meta(slicing.META_KEY)
    if declared:
        assert ctl.slicer is not None and ctl.starter.colocate == ctl.slicer.start_colocated
        assert stored is not None and slicing.load(stored)[1].slice_since == 200.0
    else:
        assert stored is None
