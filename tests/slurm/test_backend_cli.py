"""The JSON CLI backend against the real local cluster: every operation the
controller uses, and the errors it must tell apart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import replace

import pytest

from slurm_plugin.backends.base import requeue_settle_wait
from slurm_plugin.backends.cli import CliBackend
from slurm_plugin.backends.parse import array_task_ids
from slurm_plugin.config import ControllerConfig
from slurm_plugin.localcluster import procs
from teiresias.errors import JobVanished, SlurmError, SlurmUnreachable
from tests.conftest import poll

pytestmark = pytest.mark.slurm

LATER = "--begin=now+3600"  # pending, not held, and not started by Slurm meanwhile


def test_jobs_and_nodes_report_gpus(clean_slurm):
    c = clean_slurm
    run = c.submit("sleep 60", "-G", "2", "-J", "two")
    other = c.submit("sleep 60", "-p", "other", "--gres=gpu:1")
    c.wait_for(run, "RUNNING")
    c.wait_for(other, "RUNNING")
    jobs = {j.job_id: j for j in c.backend.jobs()}
    j = jobs[run]
    assert (j.state, j.gpus, j.num_nodes, j.partition, j.name) == ("RUNNING", 2, 1, "gpu", "two")
    assert len(j.nodes) == 1 and j.nodes[0] in c.nodes and j.start_time and j.end_time is None
    assert jobs[other].partition == "other" and jobs[other].gpus == 1 and jobs[other].gpus_per_node == 1
    nodes = {n.name: n for n in c.backend.nodes()}
    assert set(nodes) == set(c.nodes)
    assert sum(n.gpus for n in nodes.values()) == 4 * c.gpus_per_node
    assert sum(n.gpus_used for n in nodes.values()) == 3, "both partitions' GPUs are counted"
    assert all(n.usable and set(n.partitions) == {"gpu", "other"} for n in nodes.values())


def test_scontrol_poll_reads_the_same_jobs_as_squeue_json(clean_slurm):
    c = clean_slurm
    multi = c.submit("sleep 60", "-N", "2", "--gpus-per-node=2")
    single = c.submit("sleep 60", "-G", "3", "--comment", "teiresias:dir=/tmp/x y")
    held = c.submit("sleep 60", "-H", "-G", "1")
    later = c.submit("sleep 60", "-G", "2", "--begin=now+3600", "-t", "1-02:03:04")
    done = c.submit("true")
    failed = c.submit("exit 3")
    requeued = c.submit("sleep 60", "-G", "1")
    for j in (multi, single, requeued):
        c.wait_for(j, "RUNNING")
    c.wait_for(done, "COMPLETED")
    c.wait_for(failed, "FAILED")
    c.backend.requeue(requeued, hold=True)
    c.wait_for(requeued, "PENDING")
    mine = {multi, single, held, later, done, failed, requeued}
    fast = CliBackend(env=c.env, poll="scontrol")
    # Earlier tests' finished jobs stay in the queue for MinJobAge: compare this test's own.
    by_json = {j.job_id: j for j in c.backend.jobs() if j.job_id in mine}
    by_scontrol = {j.job_id: j for j in fast.jobs() if j.job_id in mine}
    assert set(by_json) == mine
    # The two polls name the reason of a requeued-held job differently
    # (JobHeldUser vs job_requeued_in_held_state); every other field agrees.
    assert by_json[requeued].held and by_scontrol[requeued].held
    assert {j: replace(v, state_reason="") for j, v in by_scontrol.items()} == {
        j: replace(v, state_reason="") for j, v in by_json.items()
    }
    assert {j: v.state_reason for j, v in by_scontrol.items() if j != requeued} == {
        j: v.state_reason for j, v in by_json.items() if j != requeued
    }
    assert by_json[multi].gpus == 4 and by_json[single].gpus == 3


def test_fields_poll_reads_the_same_jobs_as_squeue_json_and_stays_right_between_polls(clean_slurm):
    """The controller's default poll (backends/fields.py) against squeue --json on the
    same real jobs, every SlurmJob field; then once more after what changes between two
    polls: a running job requeued and started again (a new run: GPUs read again), an
    array task split off, a user's new -x list and array throttle."""
    c = clean_slurm
    multi = c.submit("sleep 60", "-N", "2", "--gpus-per-node=1")
    single = c.submit("sleep 60", "-G", "2", "--comment", "teiresias:dir=/tmp/x y|z", "-J", "a b|c")
    held = c.submit("sleep 60", "-H", "-G", "1", "-x", "node1")
    later = c.submit("sleep 60", "-G", "1", LATER, "-t", "1-02:03:04", "-w", "node2")
    array = c.submit("sleep 60", "-H", "-G", "1", "-a", "0-4%2")
    done = c.submit("true")
    for j in (multi, single):
        c.wait_for(j, "RUNNING")
    c.wait_for(done, "COMPLETED")
    c.backend.set_hold_mark(f"{array}_0", True)  # splits task 0 off, as the controller does
    fast = CliBackend(env=c.env, poll="fields")

    def both() -> tuple[dict, dict]:
        by_fields = {j.job_id: j for j in fast.jobs()}
        by_json = {j.job_id: j for j in c.backend.jobs()}
        return by_fields, by_json

    by_fields, by_json = both()
    # Earlier tests' finished jobs stay in the queue for MinJobAge: they are compared too.
    assert by_fields == by_json
    assert by_fields[held].excluded_nodes == ("node1",) and by_fields[later].required_nodes == ("node2",)
    assert {j.array_max_tasks for j in by_fields.values() if j.array_job_id == array} == {2}
    assert by_fields[single].gpu_ids and by_fields[single].name == "a b|c"

    old_ids = by_fields[single].gpu_ids
    c.backend.requeue(single, hold=False)
    c.wait_for(single, "PENDING", where=lambda j: j.restart_count == 1)
    time.sleep(requeue_settle_wait(c.job(single), time.time()))
    c.backend.clear_begin_time(single)
    c.wait_for(single, "RUNNING", where=lambda j: j.restart_count == 1)
    subprocess_run(c, "scontrol", "update", f"jobid={held}", "excnodelist=node3")
    subprocess_run(c, "scontrol", "update", f"jobid={array}", "arraytaskthrottle=3")
    c.backend.set_hold_mark(f"{array}_1", True)
    by_fields, by_json = both()
    assert by_fields == by_json
    assert by_fields[single].restart_count == 1 and by_fields[single].gpu_ids
    assert by_fields[held].excluded_nodes == ("node3",)
    assert {j.array_max_tasks for j in by_fields.values() if j.array_job_id == array} == {3}
    # The new run's GPUs were read, not kept from the first one (they may be the same ones).
    assert by_fields[single].gpu_ids == by_json[single].gpu_ids and old_ids


def test_the_controllers_poll_reads_a_sparse_arrays_whole_task_set(clean_slurm):
    """squeue (--json too) cuts an array's task set at 64 characters ("...,189,2..."):
    the controller splits off only the tasks it can read, so with the JSON poll a sparse
    array's later tasks went unseen until the earlier ones had left. The controller's
    default poll reads the whole set (fields.poll_env: SLURM_BITSTR_LEN=0)."""
    c = clean_slurm
    tasks = [1, 2, 5, 9, 14, 20, 27, 35, 44, 54, 65, 77, 90, 104, 119, 135, 152, 170, 189, 209, 230, 252, 275]
    array = c.submit("sleep 60", "-H", "-G", "1", f"--array={','.join(map(str, tasks))}")
    poll_mode = ControllerConfig().slurm_poll
    meta = {j.job_id: j for j in CliBackend(env=c.env, poll=poll_mode).jobs()}[array]
    assert array_task_ids(meta.array_tasks) == tasks, (poll_mode, meta.array_tasks)
    by_json = {j.job_id: j for j in c.backend.jobs()}[array]
    assert by_json.array_tasks.endswith("..."), "squeue --json no longer cuts the task set: simplify fields.poll_env"


def subprocess_run(c, *cmd: str) -> None:
    subprocess.run(list(cmd), env=c.env, check=True, capture_output=True, timeout=30)


def test_hold_release_and_priority_must_be_set_again_after_release(clean_slurm):
    c, b = clean_slurm, clean_slurm.backend
    j = c.submit("sleep 60", "-G", "1", LATER)
    b.set_priority(j, 777)
    assert b.job(j).priority == 777
    b.hold(j)
    held = b.job(j)
    assert held.held and held.priority == 0 and held.state_reason == "JobHeldAdmin"
    b.release(j)
    released = b.job(j)
    assert not released.held and released.priority != 777, "release recomputes the priority"
    b.set_priority(j, 777)
    assert b.job(j).priority == 777
    assert {x.job_id: x for x in b.jobs()}[j].priority == 777


def test_set_nodelist_pins_with_node_count_then_start_now(clean_slurm):
    c, b = clean_slurm, clean_slurm.backend
    j = c.submit("sleep 60", "-G", "1", LATER)
    b.set_nodelist(j, ("node2", "node3"))
    pinned = b.job(j)
    assert pinned.required_nodes == ("node2", "node3") and pinned.num_nodes == 2
    b.set_nodelist(j, ("node4",))
    pinned = b.job(j)
    assert pinned.required_nodes == ("node4",) and pinned.num_nodes == 1, "node count follows the list"
    b.clear_begin_time(j)
    running = c.wait_for(j, "RUNNING", timeout=20)
    assert running.nodes == ("node4",)
    with pytest.raises(SlurmError):
        b.set_nodelist(j, ("node1",))  # a running job cannot be moved


def test_requeue_goes_pending_with_restart_count_and_begin_time_cleared(clean_slurm):
    c, b = clean_slurm, clean_slurm.backend
    j = c.submit('echo "run ${SLURM_RESTART_COUNT:-0}"; sleep 60', "-G", "1")
    c.wait_for(j, "RUNNING")
    b.requeue(j, hold=False)
    pending = c.wait_for(j, "PENDING")
    assert pending.restart_count == 1 and not pending.held
    assert pending.eligible_time and pending.eligible_time > time.time() + 60, "Slurm delays a requeued job"
    time.sleep(requeue_settle_wait(pending, time.time()))
    b.clear_begin_time(j)
    again = c.wait_for(j, "RUNNING", timeout=20)
    assert again.restart_count == 1
    poll("the second run's output", lambda: "run 1" in c.output(j), 10, 0.1)
    # requeue with hold: pending, held, for the controller to release
    b.requeue(j, hold=True)
    held = c.wait_for(j, "PENDING")
    assert held.held and held.restart_count == 2
    with pytest.raises(SlurmError):
        b.requeue(j)  # requeueing a pending job is refused


@pytest.mark.parametrize("hold", [False, True], ids=["requeue", "requeuehold"])
def test_a_requeued_job_made_eligible_after_the_settle_wait_runs_again(clean_slurm, hold):
    """Made eligible inside its requeue second, a requeued job is FAILED by Slurm
    ("Job credential revoked"): this happened whenever a restart followed its
    requeue within the same second. The requeue is timed to the start of a
    second, so without the wait the release below would land in that second."""
    c, b = clean_slurm, clean_slurm.backend
    j = c.submit("sleep 60", "-G", "1")
    c.wait_for(j, "RUNNING")
    time.sleep(1.02 - time.time() % 1)
    b.requeue(j, hold=hold)
    pending = c.wait_for(j, "PENDING")
    wait = requeue_settle_wait(pending, time.time())
    assert 0 < wait <= 1 + 0.15, f"read {pending.submit_time}: the requeue second is the new SubmitTime"
    time.sleep(wait)
    b.clear_begin_time(j)
    if hold:
        b.release(j)
    assert c.wait_for(j, "RUNNING", timeout=20).restart_count == 1


SIGNAL_SCRIPT = """#!/bin/bash
child() { trap 'echo child >> sig-$SLURM_JOB_ID; exit 0' USR1; while :; do sleep 0.1; done; }
child &
trap 'echo shell >> sig-$SLURM_JOB_ID' USR1
echo ready >> sig-$SLURM_JOB_ID
while :; do sleep 0.1; done
"""


def test_signal_reaches_batch_shell_and_children(clean_slurm):
    c = clean_slurm
    j = c.submit(SIGNAL_SCRIPT)
    marks = c.jobs_dir / f"sig-{j}"
    c.wait_for(j, "RUNNING")
    poll("the job's script ready", lambda: marks.exists() and "ready" in marks.read_text(), 20, 0.1)
    c.backend.signal(j, "USR1")
    poll("USR1 at the shell and the child", lambda: {"shell", "child"} <= set(marks.read_text().split()), 10, 0.1)
    assert c.backend.job(j).state == "RUNNING", "USR1 is caught: the job keeps running"


def test_cancel_and_cancel_again(clean_slurm):
    c, b = clean_slurm, clean_slurm.backend
    j = c.submit("sleep 60", "-G", "1")
    c.wait_for(j, "RUNNING")
    b.cancel(j)
    c.wait_for(j, "CANCELLED")
    b.cancel(j)  # already ended: nothing to do, no error


def test_unknown_job_is_job_vanished(slurm_cluster):
    b = slurm_cluster.backend
    gone = 987654
    for op in (
        b.hold,
        b.release,
        b.cancel,
        b.job,
        b.clear_begin_time,
        b.requeue,
        lambda j: b.set_priority(j, 5),
        lambda j: b.signal(j, "USR1"),
        lambda j: b.set_nodelist(j, ("node1",)),
    ):
        with pytest.raises(JobVanished):
            op(gone)


def _conf_with_port(slurm_cluster, tmp_path, port: int):
    text = slurm_cluster.conf.read_text().replace(
        f"SlurmctldPort={slurm_cluster.cfg.port_base}", f"SlurmctldPort={port}"
    )
    conf = tmp_path / "slurm.conf"
    # clients retry an absent slurmctld for ~MessageTimeout (10 s by default): keep it short here
    conf.write_text(text + "MessageTimeout=2\n")
    (tmp_path / "gres.conf").write_text((slurm_cluster.conf.parent / "gres.conf").read_text())
    return conf


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_slurmctld_is_unreachable(slurm_cluster, tmp_path):
    # the same cluster's configuration aimed at a port where nothing listens
    b = CliBackend(env=slurm_cluster.env, slurm_conf=_conf_with_port(slurm_cluster, tmp_path, _free_port()))
    for op in (b.jobs, b.nodes, lambda: b.hold(1), lambda: b.signal(1, "USR1")):
        with pytest.raises(SlurmUnreachable):
            op()
    assert b.ping() is False


def test_silent_slurmctld_is_unreachable_after_timeout(slurm_cluster, tmp_path):
    # a listener that accepts and never answers: the command would wait for
    # Slurm's MessageTimeout; the backend's own timeout cuts it short
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port = srv.getsockname()[1]
    conns = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        b = CliBackend(env=slurm_cluster.env, slurm_conf=_conf_with_port(slurm_cluster, tmp_path, port), timeout=1.5)
        t0 = time.monotonic()
        with pytest.raises(SlurmUnreachable, match="did not answer"):
            b.jobs()
        assert time.monotonic() - t0 < 5
    finally:
        stop.set()
        t.join()
        for s in conns:
            s.close()
        srv.close()


def test_clean_slurm_restarts_a_daemon_a_test_killed(slurm_cluster):
    # a test that kills slurmctld (controller fault tests do) must not break the next one
    pid = slurm_cluster.cluster.ctld_pid()
    os.kill(pid, signal.SIGKILL)
    assert procs.wait_until(lambda: not procs.is_alive(pid), 10)
    slurm_cluster.clean()
    assert slurm_cluster.cluster.ctld_pid() not in (None, pid)
    j = slurm_cluster.submit("sleep 30", "-G", "1")
    slurm_cluster.wait_for(j, "RUNNING", timeout=30)
    slurm_cluster.clean()
