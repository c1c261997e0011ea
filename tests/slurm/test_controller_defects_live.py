"""Live defects of issue 20 part B, each on the real local Slurm cluster with
etc/job_submit.lua installed and the controller running as a subprocess:
requeues taken for new jobs, runs shorter than a round, holds placed after
submission, jobs Slurm can never start, node lists, heterogeneous jobs, a GPU
request dropped on a held job, array throttles, two controllers on one
cluster, and plain jobs that thrash (docs/job-states.md, docs/controller.md)."""

from __future__ import annotations

import pwd
import subprocess

import pytest

from slurm_plugin.controller.state import Phase
from tests.helpers import poll
from tests.slurm.controller_support import ControllerProc, queue_rows, submit_sleep, wait_rounds

pytestmark = pytest.mark.slurm


def scontrol(cluster, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["scontrol", *args]
    if user is not None:
        cmd = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={cluster.conf}", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=cluster.env, timeout=30)


# ---------------------------------------------------------------- B1


def test_a_requeue_by_an_admin_keeps_the_jobs_record_and_service(cluster, make_controller):
    """Slurm counts the restart at the requeue but moves SubmitTime only once the run has
    finished completing (KillWait; this job ignores SIGTERM, so for ~KillWait s): a round
    in between used to take the job for a new one under the same id (`replaced`)."""
    ctl = make_controller(policy={"queues": [100000]}).start()
    job = cluster.submit("trap '' TERM; sleep 600", "-p", "gpu", "--gpus=1", "-t", "10")
    cluster.wait_for(job, "RUNNING", timeout=30)
    poll("the controller sees it run", lambda: (r := ctl.rec(job)) and r.run_start and r.last_running_seen, 30)
    poll("2 s of service", lambda: ctl.rec(job).last_running_seen - ctl.rec(job).run_start >= 2, 30)
    out = scontrol(cluster, "requeue", str(job))  # an admin's requeue: not the controller's
    assert out.returncode == 0, out.stderr
    # Started again by the controller (held on sight, then released), on the same record.
    poll(
        "the second run",
        lambda: (r := ctl.rec(job)) and r.phase is Phase.RUNNING and r.run_restart == 1,
        60,
    )
    rec = ctl.rec(job)
    assert not ctl.audit(job, "replaced"), ctl.audit(job, "replaced")
    assert rec.closed_run_seconds >= 2 and rec.submit_restart == 1 and rec.final_state is None
    assert len(ctl.audit(job, "start")) == 2


def test_a_job_requeued_after_it_ended_keeps_its_record_and_service(cluster, make_controller):
    """An admin's `scontrol requeue` of a job that had completed (Slurm allows it until the
    job is purged) brings the same job back: its record was closed, so it got a fresh one,
    its service and first start gone (`replaced`; the soak, seed 20: j11, 25 GPU-s to 0)."""
    ctl = make_controller(policy={"queues": [100000]}).start()
    job = cluster.submit("sleep 3", "-p", "gpu", "--gpus=1", "-t", "10")
    cluster.wait_for(job, "COMPLETED", timeout=60)
    first = poll("its record closed", lambda: (r := ctl.rec(job)) and r.phase is Phase.FINISHED and r, 30)
    assert first.closed_run_seconds >= 3
    assert scontrol(cluster, "requeue", str(job)).returncode == 0
    poll("its second run ended", lambda: len(ctl.audit(job, "finished")) == 2, 90)
    rec = ctl.rec(job)
    assert not ctl.audit(job, "replaced") and len(ctl.audit(job, "reopened")) == 1
    assert rec.first_start_time == first.first_start_time and rec.closed_run_seconds >= first.closed_run_seconds + 3
    assert rec.final_state == "COMPLETED" and len(ctl.audit(job, "start")) == 2


# ---------------------------------------------------------------- B3


def test_a_run_between_two_rounds_gets_its_service_from_slurms_times(cluster, make_controller):
    """README's `--once` flow: the first round starts the job, it runs 2 s and ends before
    the second round. It used to be recorded with no service, no first start and a
    queueing delay equal to its JCT."""
    ctl = make_controller()
    job = cluster.submit("sleep 2", "-p", "gpu", "--gpus=2", "-t", "5")
    first = ctl.cli("controller", "run", "--once")
    assert first.returncode == 0, first.stderr
    assert ctl.audit(job, "start"), first.stdout
    sj = cluster.wait_for(job, "COMPLETED", timeout=60)
    second = ctl.cli("controller", "run", "--once")
    assert second.returncode == 0, second.stderr
    rec = ctl.rec(job)
    assert rec.phase is Phase.FINISHED and rec.final_state == "COMPLETED"
    assert rec.first_start_time == sj.start_time and rec.closed_run_seconds == sj.end_time - sj.start_time >= 2
    (done,) = ctl.audit(job, "finished")
    assert done["attained_gpu_seconds"] == 2 * rec.closed_run_seconds
    assert done["queueing_delay"] == pytest.approx(done["jct"] - rec.closed_run_seconds, abs=0.01)


# ---------------------------------------------------------------- B4

OWNER = "live_u1"  # a real non-root user (machine-wide: prefixed, made if missing, never removed)


@pytest.fixture
def owner(cluster) -> str:
    if subprocess.run(["id", OWNER], capture_output=True).returncode != 0:
        made = subprocess.run(["useradd", "-M", "-s", "/bin/sh", OWNER], capture_output=True, text=True)
        assert made.returncode == 0 or "already exists" in made.stderr, made.stderr
    yield OWNER
    subprocess.run(["scancel", "-u", OWNER], env=cluster.env, timeout=30)


def submit_as(cluster, user: str, gpus: int) -> int:
    out = subprocess.run(
        ["runuser", "-u", user, "--", "env", f"SLURM_CONF={cluster.conf}"]
        + ["sbatch", "--parsable", "-p", "gpu", f"--gpus={gpus}", "-t", "10", "-D", "/tmp", "-o", "/dev/null"]
        + ["--wrap", "sleep 600"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_holds_placed_after_submission_stand(cluster, make_controller, owner):
    """The owner's `scontrol hold` on a job the controller holds changes nothing Slurm shows,
    and the mark stays: the controller released it (6 of 6), an admin's hold likewise, and a
    hold on a running job was lost at its preemption. job_submit.lua writes such holds into
    the comment; the controller leaves them be until the person releases."""
    mine = submit_as(cluster, owner, 1)  # held by job_submit.lua: the controller's hold
    theirs = submit_sleep(cluster, 1)
    assert scontrol(cluster, "hold", str(mine), user=owner).returncode == 0
    assert scontrol(cluster, "hold", str(theirs)).returncode == 0  # root: an admin's hold
    ctl = make_controller(policy={"queues": [2]}).start()
    running = submit_as(cluster, owner, 1)
    cluster.wait_for(running, "RUNNING", timeout=30)
    assert scontrol(cluster, "hold", str(running), user=owner).returncode == 0  # held while it runs
    big = submit_sleep(cluster, 16)  # preempts the running one once it is in Q2
    poll("the running job preempted", lambda: ctl.audit(running, "requeue"), 60)
    poll("the big job started", lambda: ctl.audit(big, "start"), 30)
    scontrol(cluster, "update", f"jobid={big}", "timelimit=0:01")  # leaves in ~1 min; cancelled below anyway
    for job in (mine, theirs, running):
        poll(f"job {job}'s reason", lambda j=job: "held by" in (ctl.rec(j) and ctl.rec(j).reason or ""), 30)
    subprocess.run(["scancel", str(big)], env=cluster.env, check=True, timeout=30)
    cluster.wait_for(big, "CANCELLED", timeout=30)
    wait_rounds(ctl, 3)  # rounds with free GPUs: no held job is started
    assert f"uid {pwd.getpwnam(owner).pw_uid}" in ctl.rec(mine).reason, ctl.rec(mine).reason
    assert [len(ctl.audit(j, "start")) for j in (mine, theirs, running)] == [0, 0, 1]
    assert all(cluster.job(j).state == "PENDING" for j in (mine, theirs, running))
    # Each person's release hands the job back to the controller, which starts it.
    assert scontrol(cluster, "release", str(mine), user=owner).returncode == 0
    assert scontrol(cluster, "release", str(running), user=owner).returncode == 0
    assert scontrol(cluster, "release", str(theirs)).returncode == 0
    for job in (mine, theirs, running):
        cluster.wait_for(job, "RUNNING", timeout=60)
    assert cluster.job(mine).person_hold is None


# ---------------------------------------------------------------- B6


def test_node_lists_and_exclusions_are_kept_and_said(cluster, make_controller):
    """`-w node4` was rewritten by the controller's placement (the user's list lost) and
    `-x` ignored (the start failed with BadConstraints and waited out a back-off)."""
    busy = submit_sleep(cluster, 4, 600, "other", "-w", "node4")  # node4 full: the -w job waits
    cluster.wait_for(busy, "RUNNING", timeout=30)
    ctl = make_controller(placement="consolidate").start()
    pinned = submit_sleep(cluster, 1, 600, "gpu", "-w", "node4")
    spared = submit_sleep(cluster, 4, 600, "gpu", "-x", "node1,node2")
    cluster.wait_for(spared, "RUNNING", timeout=30)
    assert cluster.job(spared).nodes == ("node3",)  # consolidate alone would take node1
    reason = poll("the -w job's reason", lambda: (r := ctl.rec(pinned)) and "-w node4" in r.reason and r.reason, 30)
    assert "0 free there" in reason, reason
    subprocess.run(["scancel", str(busy)], env=cluster.env, check=True, timeout=30)
    sj = cluster.wait_for(pinned, "RUNNING", timeout=60)
    assert sj.nodes == ("node4",)
    assert ctl.rec(pinned).user_nodes == "node4"
    assert not ctl.audit(spared, "start-failed") and not ctl.audit(pinned, "start-failed")


# ---------------------------------------------------------------- B5, B7: refused at submission


def test_gpu_types_no_node_has_and_heterogeneous_jobs_are_refused_in_one_line(cluster):
    """Slurm accepts a typed GPU request no node can give when the job is held (as
    job_submit.lua holds every GPU job), and a heterogeneous job whose components the
    controller cannot start one by one: both waited for ever (and preempted others)."""
    asks = {
        ("--gres=gpu:a100:2",): "no node has GPUs of type 'a100' (types here: none, untyped GPUs only)",
        ("--gpus-per-node=v100:1",): "no node has GPUs of type 'v100'",
        ("-H", "--gres=gpu:nosuchtype:4"): "no node has GPUs of type 'nosuchtype'",
        ("--gpus=1", ":", "-p", "gpu", "--gpus=1"): "heterogeneous jobs are not scheduled on partition gpu",
    }
    for args, words in asks.items():
        r = subprocess.run(
            ["sbatch", "-p", "gpu", "-t", "5", *args, "--wrap", "sleep 1"],
            capture_output=True,
            text=True,
            env=cluster.env,
            cwd=cluster.jobs_dir,
            timeout=30,
        )
        ours = [line for line in r.stderr.splitlines() if "teiresias:" in line]
        assert r.returncode != 0 and len(ours) == 1 and words in ours[0], (args, r.stderr)
    assert cluster.active_jobs() == []
    ok = cluster.submit("sleep 1", "-p", "gpu", "--gres=gpu:2", "-t", "5")  # untyped: held as ever
    assert cluster.job(ok).held_by_teiresias


# ---------------------------------------------------------------- B8


def test_a_held_job_that_stops_asking_for_gpus_is_released_to_slurm(cluster, make_controller):
    """`scontrol update gres=gpu:0` on a job the controller held left it held for ever,
    ranked in `queue` as "waiting for 1 GPUs", and later recorded VANISHED."""
    ctl = make_controller(policy={"queues": [100000]}).start()
    full = submit_sleep(cluster, 16, 600, "gpu", "--mem=100M")  # every GPU (not the memory): the next job waits
    cluster.wait_for(full, "RUNNING", timeout=30)
    job = cluster.submit("sleep 2", "-p", "gpu", "--gres=gpu:1", "-t", "5", "--mem=100M")
    poll("the job waiting", lambda: (r := ctl.rec(job)) and r.reason.startswith("waiting for"), 30)
    assert scontrol(cluster, "update", f"jobid={job}", "gres=gpu:0").returncode == 0
    poll("released to Slurm", lambda: ctl.audit(job, "unmanaged"), 30)
    assert "asks for no GPU" in ctl.audit(job, "unmanaged")[0]["reason"]
    sj = cluster.job(job)
    assert not sj.held and "teiresias:held" not in sj.admin_comment
    rows = queue_rows(ctl, cluster)
    assert rows[job]["reason"].startswith("left to Slurm: it asks for no GPU") and rows[job]["rank"] is None
    # Slurm 22.05.8 still gives a job whose request was set to gpu:0 a GPU when it starts it
    # (gres_detail gpu:1(IDX:0), measured): it starts when the big job ends, is seen running
    # on that GPU (as a job started without the controller), and ends with its own state.
    subprocess.run(["scancel", str(full)], env=cluster.env, check=True, timeout=30)
    cluster.wait_for(job, "COMPLETED", timeout=60)
    rec = poll("its record closed", lambda: (r := ctl.rec(job)) and r.phase is Phase.FINISHED and r, 30)
    assert rec.final_state == "COMPLETED" and rec.rank is None
    assert not ctl.audit(job, "start") and not ctl.audit(job, "vanished")


# ---------------------------------------------------------------- B9


def test_an_array_throttle_is_kept_in_the_plan(cluster, make_controller):
    """Tasks beyond `%N` were released and given GPUs that idled until a sibling ended."""
    ctl = make_controller(policy={"queues": [100000]}).start()
    array = cluster.submit("sleep 600", "-p", "gpu", "--array=0-5%2", "--gpus=1", "-t", "10", "-J", "thr")
    poll(
        "two tasks running",
        lambda: sum(1 for a in ctl.audit(action="start")) == 2 and len([r for r in ctl.records().values()]) == 6,
        30,
    )
    wait_rounds(ctl, 3)
    recs = ctl.records()
    assert len(ctl.audit(action="start")) == 2
    waiting = [r for r in recs.values() if r.phase is Phase.PENDING]
    assert len(waiting) == 4 and all(f"array {array} runs 2 task(s), its limit (%2)" in r.reason for r in waiting)


# ---------------------------------------------------------------- B10


def test_one_controller_per_cluster_whatever_its_state_db(cluster, make_controller, tmp_path):
    """Two controllers on one cluster with different state DBs both acted and preempted
    each other's jobs: the lock was per DB file only."""
    first = make_controller().start()
    job = submit_sleep(cluster, 1)
    cluster.wait_for(job, "RUNNING", timeout=30)
    other = tmp_path / "second"
    other.mkdir()
    second = ControllerProc(other, cluster)
    r = second.cli("controller", "run", "--once")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "another controller (pid" in lines[0] and "manages Slurm cluster 'teiresias'" in lines[0], lines[0]
    assert not (other / "audit.jsonl").exists() or not second.audit(action="start")
    # A standby on its own state DB waits for the cluster, and takes over when the first dies.
    second.start("--standby")
    try:
        wait_rounds(first, 2)
        assert second.alive() and not second.audit(action="hold")
        first.kill9()
        later = submit_sleep(cluster, 1)
        poll("the standby starts the next job", lambda: second.audit(later, "start"), 30)
    finally:
        second.stop()


# ---------------------------------------------------------------- B12


def test_plain_jobs_are_not_thrashed_and_lost_work_is_counted(cluster, make_controller, tmp_path):
    """With a small threshold, jobs that cannot checkpoint were requeued again and again
    (runs of 38 s, 1 s, 16 s: 112 s of work lost), uncounted. By default a plain job is
    never preempted once started; where a site allows it, the work lost is counted in
    the record, the audit log, `queue` and `explain`."""
    plain = {"min_run_seconds": 30, "plain_min_run_seconds": "never"}  # the defaults
    ctl = make_controller(policy={"queues": [2]}, preemption=plain).start()
    job = submit_sleep(cluster, 16)  # every GPU; in Q2 after 1/8 s
    cluster.wait_for(job, "RUNNING", timeout=30)
    newer = submit_sleep(cluster, 4)  # Q1: it would preempt the plain job at once
    poll("the newer job's reason", lambda: (r := ctl.rec(newer)) and r.reason, 30)
    wait_rounds(ctl, 3)
    assert not ctl.audit(job, "requeue") and ctl.rec(job).phase is Phase.RUNNING
    assert "waiting for 4 GPUs" in ctl.rec(newer).reason
    ctl.stop()
    # The same state under a site that lets plain jobs be preempted at any time.
    again = make_controller(policy={"queues": [2]}, preemption={"min_run_seconds": 0, "plain_min_run_seconds": 0})
    again.start()
    (requeue,) = poll("the plain job requeued", lambda: again.audit(job, "requeue"), 30)
    assert requeue["lost_gpu_seconds"] >= 16 * 3 and requeue["acked"] is False
    lost = round(again.rec(job).lost_gpu_seconds, 1)
    assert lost == requeue["lost_gpu_seconds"] == queue_rows(again, cluster)[job]["lost_gpu_seconds"]
    out = again.cli("explain", str(job))
    assert out.returncode == 0 and f"{lost:g} GPU-s of work lost" in out.stdout, out.stdout


# ---------------------------------------------------------------- merged branches: the AdminComment


def test_the_controllers_holds_keep_the_rest_of_the_admin_comment(cluster, make_controller):
    """The controller wrote its mark as the whole AdminComment (`admincomment=teiresias:held`
    at a hold, '' at a start): an admin's own text went, and so would job_submit.lua's
    `teiresias:shard=N` stash beside it (test_sharing_multigpu_live.py's array test).
    Each of its writes now sets or takes out the mark alone: a hold on sight, a start, a
    preemption's requeuehold."""
    full = submit_sleep(cluster, 16, 600, "other")  # every GPU, outside the managed partition
    cluster.wait_for(full, "RUNNING", timeout=30)
    ctl = make_controller(policy={"queues": [2]}).start()
    job = submit_sleep(cluster, 1, 600, "gpu", "-H")  # the submitter's hold: job_submit.lua marks nothing
    assert scontrol(cluster, "update", f"jobid={job}", "admincomment=site:ticket-7").returncode == 0
    assert scontrol(cluster, "release", str(job)).returncode == 0  # pending without a hold: held on sight
    poll("held by the controller", lambda: ctl.audit(job, "hold"), 30)
    assert cluster.job(job).admin_comment == "site:ticket-7;teiresias:held"
    subprocess.run(["scancel", str(full)], env=cluster.env, check=True, timeout=30)
    cluster.wait_for(job, "RUNNING", timeout=60)
    assert cluster.job(job).admin_comment == "site:ticket-7"  # unmarked at the start, the text kept
    submit_sleep(cluster, 16)  # preempts it once it is in Q2
    poll("the job preempted", lambda: ctl.audit(job, "requeue"), 60)
    assert cluster.job(job).admin_comment == "site:ticket-7;teiresias:held"


# ---------------------------------------------------------------- found by the soak (docs/benchmarks.md "Soak")


def test_a_job_slurm_passes_over_for_a_job_above_it_is_not_given_up(cluster, make_controller):
    """A released job Slurm cannot start yet has its nodes taken out of Slurm's scheduling pass
    for every job below it (22.05 job_scheduler.c), which shows ReqNodeNotAvail. The
    controller took that for a node that is down: the start given up at once, backed off
    60 s, then 120 s (the soak, seed 22: an `afterok` job refused so at each start, never
    run). Here node1's CPUs are all taken by a job of another partition: the first job waits
    for them, the second behind it; both start when the CPUs come free."""
    hog = cluster.submit("sleep 600", "-p", "other", "-w", "node1", "-c", "8", "-t", "10")
    cluster.wait_for(hog, "RUNNING", timeout=30)
    first = submit_sleep(cluster, 2, 600, "gpu", "-w", "node1")
    second = submit_sleep(cluster, 2, 600, "gpu", "-w", "node1")
    ctl = make_controller().start()
    poll("Slurm passing over the second", lambda: cluster.job(second).state_reason.startswith("ReqNodeNotAvail"), 30)
    wait_rounds(ctl, 2)
    subprocess.run(["scancel", str(hog)], env=cluster.env, check=True, timeout=30)
    for job in (first, second):
        cluster.wait_for(job, "RUNNING", timeout=15)
    assert not ctl.audit(second, "start-failed") and len(ctl.audit(second, "start")) == 1


def test_jobs_slurm_passes_over_for_jobs_above_them_keep_their_start(cluster, make_controller):
    """A released job Slurm cannot start (node1's CPUs taken by another partition's job)
    stops its scheduling pass for the whole partition once a wider job above the rest
    cannot have its nodes either: every job below waits with reason Priority until the
    backfill pass, and the start timeout held them all again, backed off 60 s (the soak,
    seed 23: j16, j20). The jobs above time out; the one below keeps its start, and Slurm's
    next pass (their hold) starts it."""
    hog = cluster.submit("sleep 600", "-p", "other", "-w", "node1", "-c", "8", "-t", "10")
    cluster.wait_for(hog, "RUNNING", timeout=30)
    first = submit_sleep(cluster, 1, 600, "gpu", "-w", "node1")  # Slurm cannot start it: no CPU
    wide = cluster.submit("sleep 600", "-p", "gpu", "-N", "4", "--gpus-per-node=1", "-t", "10")  # node1 too
    last = submit_sleep(cluster, 1, 600, "gpu", "-w", "node2")
    ctl = make_controller().start()  # start timeout 20 s
    poll("the last job passed over", lambda: cluster.job(last).state_reason == "Priority", 30)
    cluster.wait_for(last, "RUNNING", timeout=60)
    poll(
        "the jobs above it held again", lambda: ctl.audit(first, "start-failed") and ctl.audit(wide, "start-failed"), 30
    )
    assert not ctl.audit(last, "start-failed") and len(ctl.audit(last, "start")) == 1


def test_a_job_whose_dependency_ended_starts_at_the_next_round(cluster, make_controller):
    """slurmctld tests a held job's dependency only in its periodic passes (`afterok:A` still
    `(unfulfilled)` 52 s after A completed, measured), and the controller waited for it to
    say so, its GPUs idle (the soak, seed 20: j8, 13 s). It judges the dependency from its
    own poll now: a chain of two `afterok` links runs in seconds, not two periodic passes;
    `afternotok` of a job that completed stays waiting."""
    ctl = make_controller(policy={"queues": [100000]}).start()
    first = submit_sleep(cluster, 1, 2)
    then = submit_sleep(cluster, 1, 2, "gpu", f"--dependency=afterok:{first}")
    last = submit_sleep(cluster, 1, 600, "gpu", f"--dependency=afterok:{then}")
    never = submit_sleep(cluster, 1, 600, "gpu", f"--dependency=afternotok:{first}")
    ended = cluster.wait_for(first, "COMPLETED", timeout=60).end_time
    started = cluster.wait_for(last, "RUNNING", timeout=60).start_time
    assert ended is not None and started is not None and started - ended < 25, (ended, started)
    assert not ctl.audit(never, "start") and cluster.job(never).state == "PENDING"
    assert "afternotok" in ctl.rec(never).reason
