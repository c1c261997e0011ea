"""Slurm's EpilogSlurmctld pokes the live controller (controller/events.py).

The test cluster's slurm.conf runs the rendered etc/teiresias-poke at every job
end; the controller listens on the cluster's events socket with a 30 s poll
interval, so anything that happens within a few seconds of a job's end was
woken by the poke, not by a poll.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_plugin.controller.audit import STAGES, read_audit, timelines
from tests.helpers import poll
from tests.slurm.controller_support import LUA, submit_protocol_job, submit_sleep

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def lua_cluster(slurm_cluster):
    """The test cluster with job_submit.lua and, for this module only, Slurm's
    pokes (EpilogSlurmctld, ``cluster up --events``): the shared cluster runs
    without them, as Slurm schedules differently with one (docs/admin.md "Events")."""
    with slurm_cluster.reconfigured(job_submit_lua=LUA, events=True) as c:
        c.lua_cfg = replace(c.cfg, job_submit_lua=LUA, events=True)
        yield c


POLL_S = 30
PREEMPT_POLL_S = 10


def test_a_job_ending_wakes_the_controller_and_the_next_job_starts_within_2s(cluster, make_controller):
    first = submit_sleep(cluster, 16, 4)  # the whole cluster, 4 s
    second = submit_sleep(cluster, 16, 600)  # waits for all 16 GPUs
    ctl = make_controller(
        policy={"name": "fifo"}, poll_interval=POLL_S, events={"socket": str(cluster.cfg.events_socket)}
    ).start()
    poll("the controller listening", lambda: "listening for Slurm events" in ctl.logtext(), 30)
    done = cluster.wait_for(first, "COMPLETED", timeout=60)
    started = cluster.wait_for(second, "RUNNING", timeout=POLL_S - 5)
    assert done.end_time is not None and started.start_time is not None
    # Slurm's times are whole seconds: 2 s of controller latency can read as 3.
    assert started.start_time - done.end_time <= 3, (done.end_time, started.start_time, ctl.logtext()[-2000:])
    assert ctl.alive()


def test_a_preempted_job_has_every_stage_in_its_timeline(cluster, make_controller, tmp_path):
    # Submissions are seen at the next poll (no Slurm hook fires for a held job), so
    # both are submitted while the controller's first two rounds are due anyway.
    old = submit_protocol_job(cluster, tmp_path, 16, run_for=2 * PREEMPT_POLL_S, name="old")
    # 100 GPU-s: old (16 GPUs) is past it at the second round, new (16 GPUs x 3 s) never is.
    make_controller(
        poll_interval=PREEMPT_POLL_S, policy={"queues": [100]}, events={"socket": str(cluster.cfg.events_socket)}
    ).start()
    cluster.wait_for(old, "RUNNING", timeout=30)
    # At the next round old has 16 GPUs x several s > the threshold (Q2),
    # and new (Q1) preempts it; new's end pokes old back onto its GPUs.
    new = submit_sleep(cluster, 16, 3)
    cluster.wait_for(new, "COMPLETED", timeout=PREEMPT_POLL_S + 40)
    cluster.wait_for(old, "COMPLETED", timeout=60, where=lambda s: s.restart_count == 1)
    poll(
        "old's finished stage",
        lambda: any(s[0] == "finished" for s in timelines(read_audit(tmp_path / "audit.jsonl")).get(old, [])),
        PREEMPT_POLL_S + 10,
    )

    tl = timelines(read_audit(tmp_path / "audit.jsonl"))
    stages = [s for s, _, _ in tl[old]]
    run0 = [s for s, _, run in tl[old] if run == 0]
    assert run0 == ["submitted", "decided", "released", "started", "signalled", "acked", "requeued"], tl[old]
    assert [s for s, _, run in tl[old] if run == 1] == ["decided", "released", "started", "finished"], tl[old]
    assert set(stages) == set(STAGES)
    assert [s for s, _, _ in tl[new]] == ["submitted", "decided", "released", "started", "finished"], tl[new]
    at = [a for _, a, _ in tl[old]]
    # Slurm's submitted/started/finished are whole seconds: a stage may read up to 1 s early.
    assert all(b >= a - 1.0 for a, b in zip(at, at[1:])), tl[old]
    # The new job was released in the very round that requeued old: that round's decision
    # (the time of its Slurm poll) precedes old's requeue; a later round's would follow it.
    requeued = next(a for s, a, _ in tl[old] if s == "requeued")
    decided_new = next(a for s, a, _ in tl[new] if s == "decided")
    released_new = next(a for s, a, _ in tl[new] if s == "released")
    assert decided_new < requeued < released_new, (tl[old], tl[new])
    # ... and old came back within seconds of new's end (the poke), not at the next poll.
    new_end = next(a for s, a, _ in tl[new] if s == "finished")
    back = next(a for s, a, run in tl[old] if s == "released" and run == 1)
    assert back - new_end < 2.5, (tl[old], tl[new])


def test_a_demotion_is_acted_on_when_it_happens_not_at_the_next_poll(cluster, make_controller, tmp_path):
    """las with a 100 GPU-s first queue and a 30 s poll: a 16-GPU job crosses it ~6 s
    into its run. The controller asks the policy when the ranking next changes
    (quiet_until) and runs a round then, so the 16-GPU job waiting in the first queue
    preempts it within seconds; without that round it would wait for the next poll."""
    old = submit_protocol_job(cluster, tmp_path, 16, run_for=120, name="old")
    make_controller(
        poll_interval=POLL_S, policy={"queues": [100]}, events={"socket": str(cluster.cfg.events_socket)}
    ).start()
    running = cluster.wait_for(old, "RUNNING", timeout=30)
    new = submit_sleep(cluster, 16, 3)  # seen by the round at the demotion, ~6 s from now
    started = cluster.wait_for(new, "RUNNING", timeout=POLL_S - 5)
    assert running.start_time is not None and started.start_time is not None
    assert started.start_time - running.start_time < 20, (running.start_time, started.start_time)
    cluster.wait_for(new, "COMPLETED", timeout=60)
