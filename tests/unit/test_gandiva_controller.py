"""Gandiva's decisions in the controller (slurm_plugin/controller/slicing.py): fast unit tests.

Slurm data as squeue reports it, the real reconcile and audit log. Slurm's
side is a recording double (``Calls``), allowed here because these tests sit
beside the live ones: tests/slurm/test_gandiva_live.py runs the same code on
the real local Slurm with real tsbatch PyTorch jobs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_plugin.backends.base import SlurmJob, SlurmNode
from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog, read_audit
from slurm_plugin.controller.reconcile import reconcile
from slurm_plugin.controller.slicing import Member, Slicer, dump, load
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import JobId, JobState, Placement, Plan
from teiresias.errors import ConfigError
from tests.unit.round_support import shard_job

CFG = parse_config({"partitions": ["gpu"]})
NODES = [
    SlurmNode("node1", frozenset({"MIXED"}), 1, 1, ("gpu",), cpus=8, mem_mb=8192),
    SlurmNode("node2", frozenset({"IDLE"}), 1, 0, ("gpu",), cpus=8, mem_mb=8192),
]


def sjob(job_id: int, state: str, nodes=("node1",), *, comment: str = "") -> SlurmJob:
    return shard_job(job_id, state, nodes, start_time=50.0, comment=comment)


class Calls:
    """Records what the Slicer asks of Slurm (test double, see the module docstring)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def suspend(self, job_id: int) -> None:
        self.calls.append(("suspend", job_id))

    def resume(self, job_id: int) -> None:
        self.calls.append(("resume", job_id))


def records() -> dict[int, JobRecord]:
    on1 = Placement.of({"node1": 1})
    return {
        j: JobRecord(
            job_id=j,
            gpus=1,
            submit_time=10.0 + j,
            phase=Phase.RUNNING,
            phase_since=50.0,
            planned=on1,
            run_start=50.0,
            run_restart=0,
            comment="teiresias:dir=/nonexistent;elastic=1-2",
        )
        for j in (7, 8)
    }


def slicer(tmp_path: Path) -> tuple[Slicer, Calls, Path]:
    calls = Calls()
    log = tmp_path / "audit.jsonl"
    return Slicer(calls, AuditLog(log), dry_run=False), calls, log  # type: ignore[arg-type]


def test_a_suspended_job_reaches_the_policy_running_suspended_in_its_group(tmp_path):
    s, _, _ = slicer(tmp_path)
    s.members = {7: Member(group=[8], slices=2, slice_since=90.0), 8: Member(group=[7], slice_since=95.0)}
    out = reconcile(CFG, records(), [sjob(7, "SUSPENDED"), sjob(8, "RUNNING")], NODES, 100.0)
    assert 7 not in out.in_transit  # a suspended job still holds its GPU
    s.annotate(out, 100.0)
    jobs = {j.job_id: j for j in out.snapshot.jobs}
    assert jobs[JobId(7)].state is JobState.RUNNING and jobs[JobId(7)].suspended
    assert not jobs[JobId(8)].suspended
    assert jobs[JobId(7)].colocated_with == (8,) and jobs[JobId(8)].colocated_with == (7,)
    assert (jobs[JobId(7)].slices, jobs[JobId(7)].slice_since) == (2, 90.0)
    assert jobs[JobId(7)].elastic == (1, 2)
    # The group's one GPU counted once: node1 full, node2 free.
    assert out.snapshot.free_gpus() == {"node1": 0, "node2": 1}


def test_suspend_and_resume_are_called_counted_and_audited_with_their_numbers(tmp_path):
    s, calls, log = slicer(tmp_path)
    s.members = {7: Member(group=[8]), 8: Member(group=[7])}
    out = reconcile(CFG, records(), [sjob(7, "RUNNING"), sjob(8, "SUSPENDED")], NODES, 100.0)
    plan = Plan(
        suspend=(JobId(7),),
        resume=(JobId(8),),
        keep=(JobId(7), JobId(8)),
        notes={JobId(7): "suspend: its 3 s slice is over", JobId(8): "resume: its turn"},
    )
    s.enact(out, plan, 100.0)
    assert calls.calls == [("suspend", 7), ("resume", 8)]
    assert s.members[7].slices == 1 and s.members[7].slice_since == 100.0 and s.members[8].slice_since == 100.0
    got = [(e["job"], e["action"], e["reason"]) for e in read_audit(log)]
    assert got == [(7, "suspend", "suspend: its 3 s slice is over"), (8, "resume", "resume: its turn")]
    # Already in the asked state: nothing is sent to Slurm twice.
    out = reconcile(CFG, records(), [sjob(7, "SUSPENDED"), sjob(8, "RUNNING")], NODES, 101.0)
    s.enact(out, plan, 101.0)
    assert calls.calls == [("suspend", 7), ("resume", 8)]


def test_pack_unpack_and_a_migration_are_recorded_and_the_move_goes_through_preemption(tmp_path):
    s, calls, log = slicer(tmp_path)
    s.members = {7: Member(group=[8]), 8: Member(group=[7])}
    out = reconcile(CFG, records(), [sjob(7, "SUSPENDED"), sjob(8, "RUNNING")], NODES, 100.0)
    s.enact(out, Plan(pack=(JobId(7), JobId(8)), notes={JobId(7): "util 30% + 40% <= 100%"}), 100.0)
    assert s.members[7].packed and s.members[8].packed
    assert s.members[7].slice_since == 100.0  # a packed group is judged a slice after packing
    s.enact(out, Plan(unpack=(JobId(7), JobId(8))), 100.0)
    assert not s.members[7].packed and s.members[7].pack_failed
    to2 = Placement.of({"node2": 1})
    plan = Plan(migrate={JobId(7): to2}, keep=(JobId(7), JobId(8)), notes={JobId(7): "consolidate"})
    s.resume_before_preempt(out, plan, 100.0)
    assert calls.calls == [("resume", 7)]  # a suspended job gets no SIGTERM: resumed before its checkpoint
    s.enact(out, plan, 100.0)
    assert s.members[7].target_placement() == to2 and s.members[7].group == [] and s.members[8].group == []
    moving = s.moving(plan)
    assert moving.preempt == (JobId(7),) and moving.reasons[JobId(7)] == "migrate: consolidate"
    actions = [e["action"] for e in read_audit(log)]
    assert actions == ["pack", "pack", "unpack", "unpack", "resume", "migrate"]
    # While it checkpoints its target stays reserved; once requeued it is RUNNING there.
    s.annotate(out, 101.0)
    assert out.snapshot.unavailable == {"node2": 1}
    recs = records()
    recs[7].phase, recs[7].run_start = Phase.PENDING, None
    pending = reconcile(CFG, recs, [sjob(7, "PENDING", ()), sjob(8, "RUNNING")], NODES, 102.0)
    s.annotate(pending, 102.0)
    j7 = next(j for j in pending.snapshot.jobs if j.job_id == 7)
    assert j7.state is JobState.RUNNING and j7.placement == to2 and j7.num_gpus == 1


def test_state_round_trips_through_the_store_text():
    members = {7: Member(slices=3, migrations=1, group=[8], packed=True, target=[["node2", 1]], target_kind="migrate")}
    assert load(dump(members)) == members
    assert load(None) == {} and load("not json") == {}
    assert json.loads(dump(members))["7"]["slices"] == 3


def test_policy_gandiva_knobs_in_the_config():
    cfg = parse_config(
        {"partitions": ["gpu"], "policy": {"name": "gandiva", "gandiva": {"slice": 3, "packing": False}}}
    )
    assert dict(cfg.policy.gandiva) == {"slice": 3.0, "packing": False}
    with pytest.raises(ConfigError, match="policy.gandiva"):
        parse_config({"partitions": ["gpu"], "policy": {"name": "gandiva", "gandiva": {"slices": 3}}})
    with pytest.raises(ConfigError, match="policy.gandiva.packing"):
        parse_config({"partitions": ["gpu"], "policy": {"name": "gandiva", "gandiva": {"packing": 3}}})


def test_every_gandiva_knob_in_the_config_reaches_the_policy():
    """loop.gandiva_params names GandivaParams' fields one by one: a knob added to
    GANDIVA_KEYS (or to GandivaParams) without it there would be silently dropped."""
    from dataclasses import fields

    from slurm_plugin.controller.loop import default_policy, gandiva_params
    from teiresias.config import GANDIVA_KEYS
    from teiresias.policy.gandiva.params import GandivaParams

    assert set(GANDIVA_KEYS) == {f.name for f in fields(GandivaParams)}
    d = GandivaParams()
    knobs = {k: (not getattr(d, k)) if switch else getattr(d, k) + 1 for k, switch in GANDIVA_KEYS.items()}
    cfg = parse_config({"partitions": ["gpu"], "policy": {"name": "gandiva", "gandiva": knobs}})
    got = gandiva_params(cfg)
    assert got == GandivaParams(**knobs)
    assert isinstance(got.max_height, int) and isinstance(got.defrag_threshold, int)
    assert default_policy(cfg, None).params == got
    assert gandiva_params(parse_config({"partitions": ["gpu"]})) is None


def test_queue_rows_show_the_group_slices_and_migrations():
    from slurm_plugin.controller.view import build_rows

    members = {7: Member(group=[8], slices=4, migrations=1), 8: Member(group=[7], slices=3)}
    rows = {r.job_id: r.to_json() for r in build_rows(records().values(), 100.0, gandiva=members)}
    assert {k: rows[7][k] for k in ("shared_with", "colocated_with", "slices", "migrations")} == {
        "shared_with": 8,
        "colocated_with": [8],
        "slices": 4,
        "migrations": 1,
    }
    assert rows[8]["shared_with"] == 7 and rows[8]["slices"] == 3
    plain = build_rows(records().values(), 100.0)[0].to_json()
    assert (plain["shared_with"], plain["slices"], plain["migrations"]) == (None, 0, 0)


def test_step_times_come_from_the_hooks_records_of_the_current_mode(tmp_path):
    """Introspection (§3.2) from runs.jsonl written by the hooks' own helper: the window
    starts at the last mode change, so time suspended before it is not a slow step."""
    from teiresias.jobfiles import RunRecord, append_run

    recs = records()
    for j in (7, 8):
        recs[j].comment = f"teiresias:dir={tmp_path}"
        (tmp_path / str(j)).mkdir()
    # Job 7: 10 steps by t=100, suspended 100..150, then 10 steps in 1 s (0.1 s/step).
    for steps, t in ((10, 100.0), (11, 150.1), (21, 151.1)):
        append_run(
            tmp_path / "7", RunRecord(job_id=7, restart_count=0, steps=steps, median_step_s=0.1, nodes=1, time=t)
        )
    s, _, _ = slicer(tmp_path)
    s.members = {7: Member(group=[8], slice_since=150.0), 8: Member(group=[7], slice_since=150.0)}
    out = reconcile(CFG, recs, [sjob(7, "RUNNING"), sjob(8, "SUSPENDED")], NODES, 152.0)
    s.annotate(out, 152.0)
    j7 = next(j for j in out.snapshot.jobs if j.job_id == 7)
    assert j7.step_time == pytest.approx(0.1) and j7.solo_step_time == pytest.approx(0.1)
    # Packed from t=151: only the records after it count, and they are not solo.
    s.members[7].packed = s.members[8].packed = True
    s.members[7].slice_since = 151.0
    append_run(tmp_path / "7", RunRecord(job_id=7, restart_count=0, steps=26, median_step_s=0.1, nodes=1, time=153.1))
    out = reconcile(CFG, records() | {7: recs[7], 8: recs[8]}, [sjob(7, "RUNNING"), sjob(8, "RUNNING")], NODES, 154.0)
    s.annotate(out, 154.0)
    j7 = next(j for j in out.snapshot.jobs if j.job_id == 7)
    assert j7.step_time == pytest.approx(0.4) and j7.solo_step_time == pytest.approx(0.1) and j7.packed


def test_an_ended_job_keeps_its_counts_but_leaves_its_group(tmp_path):
    s, _, _ = slicer(tmp_path)
    s.members = {7: Member(group=[8], slices=2, migrations=1), 8: Member(group=[7], slices=1)}
    ended = sjob(8, "COMPLETED")
    out = reconcile(CFG, records(), [sjob(7, "RUNNING"), ended], NODES, 100.0)
    s.annotate(out, 100.0)
    assert (s.members[8].slices, s.members[8].group) == (1, [])
    assert next(j for j in out.snapshot.jobs if j.job_id == 7).colocated_with == ()
    assert s.members[7].migrations == 1


def test_a_resize_of_a_job_without_a_per_node_gpu_count_is_refused_before_any_checkpoint(tmp_path):
    s, _, log = slicer(tmp_path)
    per_job = replace(sjob(7, "RUNNING"), gpus_per_node=0)  # -G 1: Slurm cannot change it while pending
    out = reconcile(CFG, records(), [per_job, sjob(8, "RUNNING")], NODES, 100.0)
    plan = Plan(resize={JobId(7): Placement.of({"node1": 2})}, keep=(JobId(7), JobId(8)))
    s.enact(out, plan, 100.0)
    assert s.moving(plan).preempt == ()  # not checkpointed for a restart that cannot happen
    assert [e["action"] for e in read_audit(log)] == ["grow-refused"]
