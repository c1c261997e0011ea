"""Gandiva's mechanisms, each on a hand-made snapshot (OSDI'18 §4, Algorithm 1)."""

from __future__ import annotations

from dataclasses import replace

from teiresias.domain import JobId, JobUsage, Placement
from teiresias.policy.gandiva import GandivaParams, GandivaPolicy
from teiresias.policy.placement import ConsolidatePlacement
from teiresias.policy.testing import cluster, pending, running, snap

J = JobId


def gandiva(**kw: object) -> GandivaPolicy:
    return GandivaPolicy(ConsolidatePlacement(), GandivaParams(**kw))  # type: ignore[arg-type]


def test_algorithm1_prefers_the_least_loaded_node_of_the_same_affinity() -> None:
    # s0n0 holds a 1-GPU job, s0n1 a 2-GPU job, s0n2 two 1-GPU jobs, s0n3 is empty.
    c = cluster(4, 4)
    jobs = [
        running(1, 1, {"s0n0": 1}),
        running(2, 2, {"s0n1": 2}),
        running(3, 1, {"s0n2": 1}),
        running(4, 1, {"s0n2": 1}),
    ]
    plan = gandiva().decide(snap(c, *jobs, pending(5, 1), pending(6, 2), pending(7, 4), now=1))
    assert plan.start[J(5)] == Placement.of({"s0n0": 1})  # affinity 1, load 1/4 < 2/4
    assert plan.start[J(6)] == Placement.of({"s0n1": 2})  # affinity 2
    assert plan.start[J(7)] == Placement.of({"s0n3": 4})  # an unallocated node
    assert not plan.colocate and plan.keep == (1, 2, 3, 4)


def test_algorithm1_relaxes_affinity_before_it_over_subscribes() -> None:
    # Only s0n1 (affinity 2) has a free GPU: a 1-GPU job takes it rather than time-slice.
    c = cluster(2, 2)
    plan = gandiva().decide(
        snap(
            c, running(1, 1, {"s0n0": 1}), running(2, 1, {"s0n0": 1}), running(3, 1, {"s0n1": 1}), pending(4, 1), now=1
        )
    )
    assert plan.start[J(4)] == Placement.of({"s0n1": 1}) and not plan.colocate


def test_overload_time_slices_on_the_node_and_the_newcomer_runs_first() -> None:
    # Two 1-GPU jobs bound to GPUs 0 and 1 of s0n0 (shard jobs started alone): the
    # newcomer joins the node, bound to both GPUs, and runs at once on the GPU of the job
    # that has run longest (job 1, the lower id on a tie), which is suspended.
    c = cluster(1, 2)
    plan = gandiva().decide(
        snap(
            c,
            running(1, 1, {"s0n0": 1}, slice_since=0.0, bound_gpus=(0,)),
            running(2, 1, {"s0n0": 1}, slice_since=0.0, bound_gpus=(1,)),
            pending(3, 1),
            pending(4, 2),
            now=5,
        )
    )
    assert plan.start[J(3)] == Placement.of({"s0n0": 1}) and plan.start[J(3)].ids_on("s0n0") == (0,)
    col = plan.colocate[J(3)]
    assert col.partners == (J(1), J(2)) and col.mode == "slice" and col.gpus == (0, 1)
    assert plan.suspend == (J(1),) and plan.resume == ()  # early feedback: the newcomer's slice first
    # A 2-GPU job finds no node of affinity 2 to share: it waits (Algorithm 1 line 14).
    assert J(4) not in plan.start and "affinity 2" in plan.reasons[J(4)]


def test_max_height_caps_how_many_jobs_share_a_gpu() -> None:
    c = cluster(1, 1)
    a = running(1, 1, {"s0n0": 1}, colocated_with=(J(2),), bound_gpus=(0,), slice_since=0.0)
    b = running(2, 1, {"s0n0": 1}, colocated_with=(J(1),), suspended=True, bound_gpus=(0,), slice_since=0.0)
    plan = gandiva(max_height=2).decide(snap(c, a, b, pending(3, 1), now=1))
    assert J(3) not in plan.start and "max-height" in plan.reasons[J(3)]
    assert J(3) in gandiva(max_height=3).decide(snap(c, a, b, pending(3, 1), now=1)).colocate


def test_round_robin_swaps_the_runner_when_its_slice_is_over() -> None:
    c = cluster(1, 1)
    group = (
        running(1, 1, {"s0n0": 1}, colocated_with=(J(2), J(3)), slice_since=100.0),
        running(2, 1, {"s0n0": 1}, colocated_with=(J(1), J(3)), suspended=True, slice_since=40.0),
        running(3, 1, {"s0n0": 1}, colocated_with=(J(1), J(2)), suspended=True, slice_since=100.0),
    )
    policy = gandiva(slice=60.0)
    early = policy.decide(snap(c, *group, now=159.0))
    assert early.suspend == () and early.resume == ()
    assert policy.wake_at(snap(c, *group, now=159.0)) == 160.0
    turn = policy.decide(snap(c, *group, now=160.0))
    assert turn.suspend == (J(1),) and turn.resume == (J(2),)  # job 2 waited longest
    assert "slice is over" in turn.notes[J(1)]


def test_a_group_left_with_nobody_running_resumes_one() -> None:
    c = cluster(1, 1)
    survivor = running(2, 1, {"s0n0": 1}, colocated_with=(J(1),), suspended=True, slice_since=3.0)
    plan = gandiva().decide(snap(c, survivor, now=10))
    assert plan.resume == (J(2),)


def _pair(util: float | None, **kw: object) -> tuple:
    usage = JobUsage(0.0, util, 1 << 30, 16 << 30, 100.0, 0) if util is not None else None
    a = running(1, 1, {"s0n0": 1}, colocated_with=(J(2),), usage=usage, slice_since=0.0, solo_step_time=0.1, **kw)  # type: ignore[arg-type]
    b = running(
        2,
        1,
        {"s0n0": 1},
        colocated_with=(J(1),),
        usage=usage,
        suspended=True,
        slice_since=0.0,
        solo_step_time=0.2,
        **kw,
    )  # type: ignore[arg-type]
    return a, b


def test_light_groups_are_packed_heavy_ones_are_not() -> None:
    c = cluster(1, 1)
    light = gandiva().decide(snap(c, *_pair(30.0), now=100))
    assert light.pack == (J(1), J(2)) and light.resume == (J(2),)
    assert "30 + 30 = 60% <= 100%" in light.notes[J(1)]
    assert gandiva().decide(snap(c, *_pair(90.0), now=100)).pack == ()
    assert gandiva(packing=False).decide(snap(c, *_pair(30.0), now=100)).pack == ()
    # Packed together before, and it lost to time-slicing: not again (Job.pack_failed_with).
    assert gandiva().decide(snap(c, *_pair(30.0, pack_failed_with=(J(1), J(2))), now=100)).pack == ()
    # A newcomer runs alone first to be profiled (§4.2.2): no packing before its first slice.
    assert gandiva().decide(snap(c, *_pair(30.0), now=10)).pack == ()


def test_a_packed_pair_slower_than_time_slicing_is_unpacked_with_its_numbers() -> None:
    c = cluster(1, 1)

    def packed(step1: float, step2: float, now: float) -> object:
        a = running(
            1, 1, {"s0n0": 1}, colocated_with=(J(2),), packed=True, slice_since=0.0, solo_step_time=0.1, step_time=step1
        )
        b = running(
            2, 1, {"s0n0": 1}, colocated_with=(J(1),), packed=True, slice_since=0.0, solo_step_time=0.2, step_time=step2
        )
        return gandiva(slice=60.0).decide(snap(c, a, b, now=now))

    lost = packed(0.25, 0.5, now=100)  # 0.4 + 0.4 = 0.8 < 1
    assert lost.unpack == (J(1), J(2)) and lost.suspend == (J(2),)
    assert "0.80 < 1.00" in lost.notes[J(1)]
    assert packed(0.15, 0.3, now=100).unpack == ()  # 0.67 + 0.67 = 1.33: packing wins
    assert packed(0.25, 0.5, now=30).unpack == ()  # not a slice packed yet: no verdict


def test_a_suspended_job_migrates_to_gpus_that_freed_up() -> None:
    # Two jobs time-slice s0n0's GPU; s0n1 has an idle GPU: the suspended one moves there.
    c = cluster(2, 1)
    a = running(1, 1, {"s0n0": 1}, colocated_with=(J(2),), slice_since=5.0)
    b = running(2, 1, {"s0n0": 1}, colocated_with=(J(1),), suspended=True, slice_since=5.0)
    plan = gandiva().decide(snap(c, a, b, now=10))
    assert plan.migrate == {J(2): Placement.of({"s0n1": 1})} and plan.resume == ()
    assert gandiva(migration=False).decide(snap(c, a, b, now=10)).migrate == {}


def test_a_spread_job_is_consolidated_when_a_node_frees_up() -> None:
    c = cluster(3, 4)
    spread = running(1, 4, {"s0n0": 2, "s0n1": 2})
    plan = gandiva().decide(snap(c, spread, running(2, 2, {"s0n0": 2}), running(3, 2, {"s0n1": 2}), now=1))
    assert plan.migrate == {J(1): Placement.of({"s0n2": 4})}
    assert "consolidates from 2 nodes" in plan.notes[J(1)]


def test_defragmentation_empties_the_emptiest_busy_node_while_jobs_wait() -> None:
    # s0n0: 1 of 4 GPUs busy (3 free >= threshold 3); s0n1: 3 busy. A 4-GPU job waits.
    c = cluster(2, 4)
    jobs = (running(1, 1, {"s0n0": 1}), running(2, 1, {"s0n1": 1}), running(3, 2, {"s0n1": 2}))
    plan = gandiva().decide(snap(c, *jobs, pending(4, 4), now=1))
    assert plan.migrate == {J(1): Placement.of({"s0n1": 1})}
    assert gandiva().decide(snap(c, *jobs, now=1)).migrate == {}  # nobody waits: no churn
    assert gandiva(defrag_threshold=4).decide(snap(c, *jobs, pending(4, 4), now=1)).migrate == {}


def test_elastic_job_grows_after_the_idle_period_and_shrinks_at_once() -> None:
    c = cluster(1, 4)
    job = running(1, 1, {"s0n0": 1}, elastic=(1, 4))
    policy = gandiva(idle_period=300.0)
    early = replace(snap(c, job, now=200), idle_since={"s0n0": 0.0})
    assert policy.decide(early).resize == {} and policy.wake_at(early) == 300.0
    plan = policy.decide(replace(snap(c, job, now=300), idle_since={"s0n0": 0.0}))
    assert plan.resize == {J(1): Placement.of({"s0n0": 4})} and "grow: 1 -> 4" in plan.notes[J(1)]
    grown = running(1, 4, {"s0n0": 4}, elastic=(1, 4))
    plan = policy.decide(replace(snap(c, grown, pending(2, 2), now=400), idle_since={"s0n0": 300.0}))
    assert plan.resize == {J(1): Placement.of({"s0n0": 2})} and "shrink: 4 -> 2" in plan.notes[J(1)]
    assert gandiva(grow_shrink=False).decide(replace(snap(c, job, now=300), idle_since={"s0n0": 0.0})).resize == {}
