"""Gandiva's 1-GPU jobs by GPU index: server-wide time-slicing (§4.1 Figure 9), greedy
packing by introspection (§4.2.2) and migration of jobs bound to one GPU (issue 22
items 8 and 9), on hand-made snapshots and small replays."""

from __future__ import annotations

import pytest

from teiresias.domain import Allocation, Cluster, JobId, JobUsage, Placement
from teiresias.policy.gandiva import GandivaParams, GandivaPolicy
from teiresias.policy.placement import ConsolidatePlacement
from teiresias.policy.testing import cluster, running, snap
from teiresias.simulator.trace import TraceJob
from tests.unit.test_gandiva_sim import run

J = JobId


def gandiva(**kw: object) -> GandivaPolicy:
    return GandivaPolicy(ConsolidatePlacement(), GandivaParams(**kw))  # type: ignore[arg-type]


def on(node: str, gpu: int, *, floater: bool = False) -> dict:
    """A pool job's placement: bound to GPU ``gpu`` (started alone there) or, a floater,
    running on it with no GPU of its own in the counts."""
    return {"placement": Placement((Allocation(node, 0 if floater else 1, (gpu,)),))}


def pooled(job_id: int, node: str, gpu: int, bound: tuple[int, ...], **kw: object):  # type: ignore[no-untyped-def]
    j = running(job_id, 1, {node: 1}, bound_gpus=bound, **kw)  # type: ignore[arg-type]
    from dataclasses import replace

    return replace(j, **on(node, gpu, floater=len(bound) > 1))


def usage(util: float) -> JobUsage:
    return JobUsage(0.0, None, None, None, 100.0, 0, busy=util)


# ---------------------------------------------------------------- server-wide rotation
def test_six_one_gpu_jobs_on_four_gpus_each_get_four_sixths() -> None:
    """Gandiva §6.1 Figure 9: four long 1-GPU jobs on a 4-GPU server, two short ones join at
    25 min; each job should get 4 of every 6 minutes. Before (issue 22 item 9) the
    newcomers time-sliced with two fixed partners: those four got 1/2, the other two 1."""
    c = Cluster.from_tiresias_spec(1, 1, 4)
    trace = [TraceJob(i, 1, 0.0, 6000.0, "lstm") for i in range(4)]
    trace += [TraceJob(4 + i, 1, 1500.0, 1200.0, "lstm") for i in range(2)]
    r = run(trace, c, slice=60.0, migration=False, packing=False)
    end = {rec.job_id: rec.end for rec in r.records}
    # 4/6 each while six share: the short ones need 1200 / (4/6) = 1800 s, ending at 3300;
    # the long ones did 1500 + 1800 x 4/6 = 2700 s by then, and end at 3300 + 3300 = 6600.
    assert [end[4], end[5]] == pytest.approx([3300.0, 3300.0], abs=61.0)
    assert [end[i] for i in range(4)] == pytest.approx([6600.0] * 4, abs=61.0)
    assert max(end[i] for i in range(4)) - min(end[i] for i in range(4)) <= 60.0


def test_the_rotation_hands_gpus_to_the_longest_suspended_and_moves_floaters() -> None:
    # s0n0: A, B bound to GPUs 0 and 1 (started alone); floater F (bound to 0-1) runs on
    # GPU 0 since t=70, A suspended since t=70, B running since t=100. At t=130 F's slice
    # is over: A (waiting) takes GPU 0 back; B's slice is not over, so F waits.
    c = cluster(1, 2)
    a = pooled(1, "s0n0", 0, (0,), suspended=True, slice_since=70.0)
    b = pooled(2, "s0n0", 1, (1,), slice_since=100.0)
    f = pooled(3, "s0n0", 0, (0, 1), slice_since=70.0)
    plan = gandiva(slice=60.0).decide(snap(c, a, b, f, now=130.0))
    assert plan.resume == (J(1),) and plan.suspend == (J(3),)
    assert "resume: its turn on GPU 0" in plan.notes[J(1)]
    # Later B's slice is over and F waited longest: F resumes on GPU 1, B is suspended.
    a2 = pooled(1, "s0n0", 0, (0,), slice_since=130.0)
    f2 = pooled(3, "s0n0", 0, (0, 1), suspended=True, slice_since=130.0)
    later = gandiva(slice=60.0).decide(snap(c, a2, b, f2, now=170.0))
    assert later.suspend == (J(2),) and later.resume == (J(3),)
    assert later.devices == {J(3): Placement.on({"s0n0": (1,)})}
    assert "another GPU than before" in later.notes[J(3)]


def test_a_newcomer_joins_the_least_loaded_node_bound_to_its_gpus() -> None:
    c = cluster(2, 2)
    jobs = [pooled(i + 1, f"s0n{i // 2}", i % 2, (i % 2,), slice_since=0.0) for i in range(4)]
    jobs.append(pooled(5, "s0n0", 0, (0, 1), slice_since=0.0, suspended=True))
    from teiresias.policy.testing import pending

    plan = gandiva(max_height=2).decide(snap(c, *jobs, pending(6, 1), now=10.0))
    col = plan.colocate[J(6)]
    assert plan.start[J(6)].nodes == ("s0n1",) and col.gpus == (0, 1) and col.partners == (J(3), J(4))
    assert plan.suspend == (J(3),)  # the job on GPU 0 of s0n1 that has run longest (tie: lower id)


def test_a_job_asking_for_whole_gpus_time_slices_with_nobody() -> None:
    """Live, a --gres=gpu job gets no shard of another's GPU and gives none (Job.shareable):
    it waits for a free GPU instead of being planned into a pool or a group, which the
    controller refused every round ("chosen to join ..., but it asks for whole GPUs")."""
    from teiresias.policy.testing import pending

    c = cluster(1, 2)
    jobs = [pooled(1, "s0n0", 0, (0,), slice_since=0.0), pooled(2, "s0n0", 1, (1,), slice_since=0.0)]
    plan = gandiva(max_height=2).decide(snap(c, *jobs, pending(3, 1, shareable=False), now=10.0))
    assert not plan.start and not plan.colocate and not plan.suspend
    assert plan.reasons[J(3)] == "waits for 1 free GPU(s): it asks for whole GPUs, so it time-slices with no job"
    # A 2-GPU group of a whole-GPU job takes no partner either.
    big = running(1, 2, {"s0n0": 2}, shareable=False)
    plan = gandiva(max_height=2).decide(snap(c, big, pending(2, 2), now=10.0))
    assert not plan.start and "holding whole GPUs" in plan.reasons[J(2)]
    assert J(2) in gandiva(max_height=2).decide(snap(c, running(1, 2, {"s0n0": 2}), pending(2, 2), now=10.0)).start


def test_an_elastic_job_is_resized_by_whole_gpus_only() -> None:
    """An idle GPU a floater holds a shard of is no GPU for a job of several (state.Round.
    whole_free). Growing onto it planned a resize the job could not get (in the simulator,
    where the job's GPUs have indices, a "resize" to the size it had: hypothesis found
    "resized job 8 to 2 GPUs; it is elastic 1-4 at 2"); counting it for a shrink took a
    GPU from the elastic job that did not let the waiting job start."""
    from teiresias.domain import Snapshot
    from teiresias.policy.testing import pending

    c = cluster(1, 4)
    # The floater runs on GPU 2 and holds a shard of GPU 3, which is idle.
    f = pooled(3, "s0n0", 2, (2, 3), slice_since=0.0)
    grown = running(1, 2, {"s0n0": 2}, elastic=(1, 4), slice_since=0.0)
    plan = gandiva(idle_period=10.0).decide(Snapshot(100.0, c, [grown, f], {}, {"s0n0": 0.0}))
    assert not plan.resize  # before: 2 -> 3 GPUs onto GPU 3
    plan = gandiva(max_height=1).decide(Snapshot(100.0, c, [grown, f, pending(4, 2)], {}, {"s0n0": 0.0}))
    assert not plan.resize  # before: 2 -> 1 GPUs, and job 4 still had no two whole GPUs


# ---------------------------------------------------------------- packing (§4.2.2)
def _waiting_pair():  # type: ignore[no-untyped-def]
    c = cluster(1, 2)
    kw = {"solo_step_time": 0.1, "first_start_time": 0.0}
    a = pooled(1, "s0n0", 0, (0,), slice_since=50.0, usage=usage(60.0), **kw)
    b = pooled(2, "s0n0", 1, (1,), slice_since=50.0, usage=usage(20.0), **kw)
    fc = pooled(3, "s0n0", 0, (0, 1), suspended=True, slice_since=50.0, usage=usage(30.0), **kw)
    fd = pooled(4, "s0n0", 1, (0, 1), suspended=True, slice_since=50.0, usage=usage(85.0), **kw)
    return c, a, b, fc, fd


def test_greedy_packing_puts_the_lightest_waiting_job_on_the_lightest_gpu() -> None:
    """The paper's heuristic: the waiting job of lowest utilisation goes onto the GPU of
    lowest utilisation where the sum fits; before (issue 22 item 8) only a whole time-sliced
    group could be packed, and only with itself."""
    c, a, b, fc, fd = _waiting_pair()
    plan = gandiva(slice=60.0).decide(snap(c, a, b, fc, fd, now=100.0))
    assert set(plan.pack) == {J(2), J(3)} and J(3) in plan.resume
    assert plan.devices == {J(3): Placement.on({"s0n0": (1,)})}
    assert "20 + 30 = 50% <= 100%" in plan.notes[J(3)]
    assert J(4) not in plan.resume  # 85% fits on neither GPU (60 + 85, 50 + 85)


def test_a_failed_packing_is_tried_on_the_next_gpu_not_given_up() -> None:
    """After packing with job 2 lost to time-slicing, job 3 is tried with job 1 on GPU 0
    (the next lowest): before, a failed pack marked the job for good."""
    c, a, b, fc, fd = _waiting_pair()
    from dataclasses import replace

    fc = replace(fc, pack_failed=True, pack_failed_with=(J(2),))
    b = replace(b, pack_failed_with=(J(3),))
    plan = gandiva(slice=60.0).decide(snap(c, a, b, fc, fd, now=100.0))
    assert set(plan.pack) == {J(1), J(3)} and plan.devices == {J(3): Placement.on({"s0n0": (0,)})}


def test_unknown_utilisation_is_never_packed() -> None:
    c, a, b, fc, fd = _waiting_pair()
    from dataclasses import replace

    blind = [replace(j, usage=None) for j in (a, b, fc, fd)]
    assert gandiva(slice=60.0).decide(snap(c, *blind, now=100.0)).pack == ()


def test_a_packed_gpu_that_loses_to_slicing_is_unpacked_and_remembered() -> None:
    c = cluster(1, 1)
    a = pooled(1, "s0n0", 0, (0,), packed=True, slice_since=0.0, solo_step_time=0.1, step_time=0.25)
    f = pooled(2, "s0n0", 0, (0,), packed=True, slice_since=0.0, solo_step_time=0.2, step_time=0.5)
    plan = gandiva(slice=60.0).decide(snap(c, a, f, now=100.0))
    assert plan.unpack == (J(1), J(2)) and plan.suspend == (J(2),)
    assert "0.80 < 1.00" in plan.notes[J(1)] and "not packed with these jobs again" in plan.notes[J(1)]


def test_packing_in_a_replay_packs_light_jobs_and_keeps_it() -> None:
    """Two light VAE jobs (Gandiva Table 1: 8.7% each) on one GPU: time-sliced first
    (profiling), then packed, and packing wins (throughput 2 x 0.85 > 1): no unpack."""
    trace = [TraceJob(i, 1, 0.0, 1000.0, "vae") for i in range(2)]
    r = run(trace, Cluster.from_tiresias_spec(1, 1, 1), slice=60.0)
    assert r.summary.packs >= 2 and r.summary.unpacks == 0
    assert max(rec.end for rec in r.records) < 1500.0  # both progress at once


# ---------------------------------------------------------------- migration by index
def test_a_job_bound_to_one_gpu_migrates_only_to_that_index() -> None:
    # s0n0: A bound to GPU 0, suspended; floater F runs on GPU 0. s0n1: B bound to GPU 1,
    # GPU 0 idle: A can move there (Slurm restarts it on its type g0 of s0n1).
    c = cluster(2, 2)
    a = pooled(1, "s0n0", 0, (0,), suspended=True, slice_since=0.0)
    f = pooled(2, "s0n0", 0, (0, 1), slice_since=5.0)
    x = pooled(3, "s0n0", 1, (1,), slice_since=5.0)
    b = pooled(4, "s0n1", 1, (1,), slice_since=5.0)
    plan = gandiva(slice=60.0).decide(snap(c, a, f, x, b, now=10.0))
    assert plan.migrate == {J(1): Placement.of({"s0n1": 1})}
    assert plan.migrate[J(1)].ids_on("s0n1") == (0,)
    # With s0n1's idle GPU at index 1 instead, A (bound to 0) cannot go; it waits its turn.
    b0 = pooled(4, "s0n1", 0, (0,), slice_since=5.0)
    assert gandiva(slice=60.0).decide(snap(c, a, f, x, b0, now=10.0)).migrate == {}


def test_a_round_between_turns_displaces_nobody() -> None:
    """The controller runs a round every poll (1 s), the simulator at slice ends: both must
    decide the same. Five jobs on four GPUs, a turn at t=11.6 gave GPU 0 back to job 1 and
    moved floater 5 onto GPU 1 (job 2 suspended). A round at 12.7 must not let job 2, just
    suspended, take GPU 1 back and push the floater onto the next GPU (live, before: the
    floater hopped GPUs at every poll)."""
    c = cluster(1, 4)
    jobs = [
        pooled(1, "s0n0", 0, (0,), slice_since=11.6),
        pooled(2, "s0n0", 1, (1,), suspended=True, slice_since=11.6),
        pooled(3, "s0n0", 2, (2,), slice_since=2.0),
        pooled(4, "s0n0", 3, (3,), slice_since=2.0),
        pooled(5, "s0n0", 1, (0, 1, 2, 3), slice_since=5.6),
    ]
    policy = gandiva(slice=6.0, packing=False)
    quiet = policy.decide(snap(c, *jobs, now=12.7))
    assert quiet.suspend == () and quiet.resume == () and quiet.devices == {}
    assert policy.wake_at(snap(c, *jobs, now=12.7)) == pytest.approx(17.6)
    # At 17.6 it is a turn again: job 2 (waiting longest) takes GPU 1 back.
    turn = policy.decide(snap(c, *jobs, now=17.6))
    assert J(2) in turn.resume
