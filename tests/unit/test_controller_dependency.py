"""controller/dependency.py: a held job's dependency judged from the jobs one poll shows
(slurmctld says so for a held job only at its next periodic pass; the live test is
tests/slurm/test_job_shapes_live.py::test_a_job_whose_dependency_ended_starts_at_the_next_round)."""

from __future__ import annotations

from typing import Any

from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.controller.dependency import Jobs, dependency_met
from tests.unit.round_support import held_job

NOW = 1000.0


def ended(job_id: int, state: str, **kw: Any) -> SlurmJob:
    return held_job(job_id, **{"state": state, "held": False, "start_time": 900.0, "end_time": 950.0, **kw})


def test_each_kind_is_met_only_by_what_it_names():
    jobs = Jobs([ended(1, "COMPLETED"), ended(2, "FAILED"), ended(3, "CANCELLED", start_time=None)])
    running = Jobs([held_job(4, state="RUNNING", held=False, start_time=990.0)])
    assert dependency_met("afterok:1(unfulfilled)", jobs, NOW)
    assert not dependency_met("afterok:2(unfulfilled)", jobs, NOW)
    assert dependency_met("afternotok:2(unfulfilled)", jobs, NOW)
    assert not dependency_met("afternotok:1(unfulfilled)", jobs, NOW)
    assert dependency_met("afterany:1(unfulfilled),afterany:2(unfulfilled)", jobs, NOW)
    assert dependency_met("after:3(unfulfilled)", jobs, NOW)  # cancelled before it began
    assert dependency_met("after:4(unfulfilled)", running, NOW)
    assert not dependency_met("after:4+1(unfulfilled)", running, NOW)  # begun 10 s ago, +1 minute
    assert not dependency_met("afterok:4(unfulfilled)", running, NOW)


def test_all_of_any_of_and_what_is_left_to_slurm():
    jobs = Jobs([ended(1, "COMPLETED"), ended(2, "FAILED")])
    assert not dependency_met("afterok:1(unfulfilled),afterok:2(unfulfilled)", jobs, NOW)
    assert dependency_met("afterok:1(unfulfilled)?afterok:2(unfulfilled)", jobs, NOW)
    assert not dependency_met("afterok:9(unfulfilled)", jobs, NOW)  # not shown (purged): Slurm's to say
    assert not dependency_met("singleton(unfulfilled)", jobs, NOW)
    assert not dependency_met("aftercorr:1_*(unfulfilled)", jobs, NOW)


def test_arrays_count_every_task_once_each_is_a_job_of_its_own():
    tasks = [ended(10 + t, "COMPLETED", array_job_id=10, array_task_id=t) for t in range(3)]
    assert dependency_met("afterok:10_*(unfulfilled)", Jobs(tasks), NOW)
    assert dependency_met("afterok:10_1(unfulfilled)", Jobs(tasks), NOW)
    failed = [*tasks[:2], ended(12, "FAILED", array_job_id=10, array_task_id=2)]
    assert not dependency_met("afterok:10_*(unfulfilled)", Jobs(failed), NOW)
    assert dependency_met("afterok:10_0(unfulfilled)", Jobs(failed), NOW)
    meta = held_job(13, array_job_id=10, array_task_id=None, array_tasks="3-5")  # tasks not split off yet
    assert not dependency_met("afterany:10_*(unfulfilled)", Jobs([*tasks, meta]), NOW)
