"""Jobs the controller holds but does not (or no longer) schedule are handed to Slurm,
and an array's throttle is kept in the snapshot (reconcile; issue 20 B7, B8, B9).
The live forms are in tests/slurm/test_controller_defects_live.py."""

from dataclasses import replace

from slurm_plugin.backends.base import HOLD_MARK
from slurm_plugin.controller.reconcile import reconcile
from slurm_plugin.controller.state import Phase
from tests.unit.test_controller_ops import CFG, NODES, _rec, sjob


def held(job_id: int, **kw):
    return replace(sjob(job_id), admin_comment=HOLD_MARK, **kw)


def test_a_heterogeneous_job_is_left_to_slurm_and_released_when_held() -> None:
    out = reconcile(CFG, {}, [held(5, het_job_id=5), held(6, het_job_id=5)], NODES, 100.0)
    assert out.records == {} and out.snapshot.jobs == ()
    assert {j: why for j, (_, why) in out.to_release.items()} == {
        5: "a component of heterogeneous job 5, which teiresias does not schedule (job_submit.lua refuses them):"
        " released to Slurm",
        6: "a component of heterogeneous job 5, which teiresias does not schedule (job_submit.lua refuses them):"
        " released to Slurm",
    }


def test_a_held_job_that_drops_its_gpus_is_released_and_says_so() -> None:
    rec = _rec(5, phase=Phase.PENDING, reason="waiting for 1 GPUs, 0 free", rank=0)
    out = reconcile(CFG, {5: rec}, [held(5, gpus=0)], NODES, 100.0)
    assert out.to_release[5][1] == "it asks for no GPU (any more): released to Slurm"
    assert out.not_waiting[5].startswith("left to Slurm: it asks for no GPU") and out.snapshot.jobs == ()
    done = reconcile(
        CFG, {5: rec}, [replace(sjob(5, "COMPLETED", submit=1000.0), gpus=0, end_time=150.0)], NODES, 160.0
    )
    assert rec.phase is Phase.FINISHED and rec.final_state == "COMPLETED" and done.vanished == []
    # A person's hold stays a person's: nothing is released.
    theirs = reconcile(CFG, {}, [held(7, gpus=0, comment="teiresias:hold=1001")], NODES, 100.0)
    assert theirs.to_release == {}


def test_tasks_past_an_array_throttle_are_not_waiting() -> None:
    tasks = [held(10 + t, array_job_id=9, array_task_id=t, array_max_tasks=2) for t in range(5)]
    tasks[0] = replace(tasks[0], state="RUNNING", held=False, admin_comment="", nodes=("node1",), start_time=90.0)
    out = reconcile(CFG, {}, tasks, NODES, 100.0)
    pending = sorted(j.job_id for j in out.snapshot.jobs if not j.is_running)
    assert pending == [11]  # one running, room for one more: the lowest task id
    assert out.not_waiting[12] == "array 9 runs 1 task(s), its limit (%2): waits for one to end"
