"""Fast unit tests beside the live ones (tests/slurm/test_submitit_live.py,
tests/slurm/test_gpu_usage_live.py): a self-requeueing job's own --signal,
its preemption on the controller's side, and the measured usage on the
record, the policy's Job and `teiresias queue`. Pure code on made-up Slurm
data and samples; the live tests run the real thing."""

from __future__ import annotations

from slurm_plugin.controller import usage
from slurm_plugin.controller.preemption import SignalSpec, requeue_due, signal_spec
from slurm_plugin.controller.reconcile import reconcile
from slurm_plugin.controller.state import JobRecord, Phase
from slurm_plugin.controller.view import build_rows, format_table
from teiresias.domain import JobState
from tests.unit.test_controller_reconcile import CFG, NODES, job
from wrappers.protocol import UsageSample

SUBMITIT = """#!/bin/bash

# Parameters
#SBATCH --gpus-per-node=1
#SBATCH --job-name=submitit
#SBATCH --signal=USR2@90
#SBATCH --time=10

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered python -u -m submitit.core._submit /x
"""


def test_the_signal_of_a_submitit_script():
    assert signal_spec(SUBMITIT) == SignalSpec("USR2", "steps", 90.0, "USR2@90")


def test_signal_spec_forms():
    assert signal_spec("#!/bin/sh\n#SBATCH --signal=B:SIGUSR1@120\n") == SignalSpec(
        "USR1", "batch", 120.0, "B:SIGUSR1@120"
    )
    # No @N: Slurm's 60 s. A number is a signal too.
    assert signal_spec("#!/bin/sh\n#SBATCH --signal 10\n") == SignalSpec("10", "steps", 60.0, "10")
    # The last one wins, as in sbatch; options after the first command are not sbatch's.
    assert signal_spec("#!/bin/sh\n#SBATCH --signal=USR1@5\n#SBATCH -N 1 --signal=R:USR2@7\n").spec == "R:USR2@7"
    assert signal_spec("#!/bin/sh\necho hi\n#SBATCH --signal=USR1@5\n") is None
    assert signal_spec("#!/bin/sh\n# This script was created by sbatch --wrap.\n\nsleep 100\n") is None
    assert signal_spec("") is None


def test_a_self_requeueing_job_gets_the_time_its_signal_promised():
    rec = JobRecord(job_id=5, phase=Phase.PREEMPTING, signal_time=100.0, signal_restart=0)
    own = SignalSpec("USR2", "steps", 90.0, "USR2@90")
    assert requeue_due(rec, 150.0, grace_seconds=30.0, own=own) is None  # past the grace, within its 90 s
    due = requeue_due(rec, 190.0, grace_seconds=30.0, own=own)
    assert due is not None and due.ack is None and "within 90s of its USR2" in due.reason


def test_a_job_that_requeued_itself_after_the_signal_is_held_and_counted_as_preempted():
    rec = JobRecord(
        job_id=7,
        gpus=1,
        submit_time=17.0,
        phase=Phase.PREEMPTING,
        phase_since=90.0,
        signal_time=90.0,
        signal_restart=0,
        run_start=50.0,
        run_restart=0,
        restart_count=0,
        last_running_seen=95.0,
        slurm_submit_time=17.0,
    )
    # Slurm after its own `scontrol requeue`: pending, not held, restart count +1, a new SubmitTime.
    sj = job(7, held=False, restart=1)
    sj = type(sj)(**{**{f: getattr(sj, f) for f in sj.__slots__}, "submit_time": 96.0})
    out = reconcile(CFG, {7: rec}, [sj], NODES, 100.0)
    r = out.records[7]
    assert r.phase is Phase.PENDING and r.preemptions == 1
    assert (r.signal_time, r.signal_restart) == (None, None)
    assert out.to_hold[7] == "requeued itself after the preemption signal; held for the policy"
    assert r.run_start is None and r.closed_run_seconds > 0  # its run is closed; attained service kept


def sample(node: str, util: float | None, used: int | None, restart: int = 0, cpu: float = 50.0) -> UsageSample:
    return UsageSample(
        job_id=1,
        restart_count=restart,
        node=node,
        time=10.0,
        gpus=2,
        gpu_util=util,
        gpu_mem_used=used,
        gpu_mem_total=None if used is None else 80 << 30,
        cpu_percent=cpu,
        rss_bytes=1 << 30,
        processes=3,
        gpu_note="" if util is not None else "NVML unavailable (x)",
    )


def test_usage_is_summed_over_the_nodes_of_the_current_run():
    u, note = usage.combine(
        [sample("n1", 20.0, 1 << 30), sample("n2", 60.0, 3 << 30), sample("n3", 99.0, 9 << 30, restart=1)],
        restart_count=0,
    )
    assert (u.gpu_util, u.gpu_mem_used, u.gpu_mem_total, u.cpu_percent, u.rss_bytes) == (
        40.0,
        4 << 30,
        160 << 30,
        100.0,
        2 << 30,
    )
    assert note == ""
    # One node without NVML: no GPU total at all (a partial sum would be wrong), and why.
    u, note = usage.combine([sample("n1", 20.0, 1 << 30), sample("n2", None, None)], restart_count=0)
    assert (u.gpu_util, u.gpu_mem_used) == (None, None) and note == "n2: NVML unavailable (x)"
    assert usage.combine([sample("n1", 20.0, 1)], restart_count=3) is None


def test_usage_reaches_the_policy_and_the_queue_table():
    rec = JobRecord(
        job_id=4,
        user="u",
        name="n",
        gpus=3,
        submit_time=14.0,
        phase=Phase.RUNNING,
        run_start=50.0,
        run_restart=0,
        slurm_submit_time=14.0,
    )
    usage.set_usage(rec, usage.combine([sample("node1", None, None, cpu=180.0)], 0))
    out = reconcile(CFG, {4: rec}, [job(4, "RUNNING", gpus=3, nodes=("node1",), held=False, start=50.0)], NODES, 100.0)
    (j,) = out.snapshot.jobs
    assert j.state is JobState.RUNNING and j.usage is not None
    assert (j.usage.gpu_util, j.usage.cpu_percent, j.usage.rss_bytes) == (None, 180.0, 1 << 30)
    pending = JobRecord(job_id=9, user="u", name="n", gpus=1, submit_time=19.0)
    table = format_table(build_rows([rec, pending], 100.0))
    head, running, waiting = table.splitlines()
    assert "GPU_UTIL" in head.split() and "GPU_MEM" in head.split()
    col = head.split().index("GPU_UTIL")
    assert running.split()[col : col + 2] == ["n/a", "n/a"]  # no NVML: said, never a failure
    assert waiting.split()[col : col + 2] == ["-", "-"]
    usage.set_usage(rec, usage.combine([sample("node1", 37.4, 3 << 30)], 0))
    row = build_rows([rec], 100.0)[0]
    assert (row.gpu_util, row.gpu_mem_used) == (37.4, 3 << 30)
    assert format_table([row]).splitlines()[1].split()[col : col + 2] == ["37%", "3.0G/80.0G"]


def test_usage_is_cleared_when_the_run_is_over():
    rec = JobRecord(
        job_id=4, gpus=1, submit_time=14.0, phase=Phase.RUNNING, run_start=50.0, run_restart=0, slurm_submit_time=14.0
    )
    usage.set_usage(rec, usage.combine([sample("node1", 10.0, 1)], 0))
    out = reconcile(CFG, {4: rec}, [job(4, "PENDING", held=True, restart=1)], NODES, 100.0)
    assert out.records[4].usage_time is None and out.records[4].gpu_util is None
