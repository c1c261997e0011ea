"""The slurmrestd backend (unix socket, rest_auth/local) against a real
slurmrestd: same answers as the CLI backend for reads, and the same effect
for the actions v0.0.38 offers."""

from __future__ import annotations

import pytest

from slurm_plugin.backends.restd import RestdBackend
from teiresias.errors import JobVanished, SlurmError, SlurmUnreachable
from tests.conftest import poll

pytestmark = pytest.mark.slurm


@pytest.fixture
def restd(clean_slurm) -> RestdBackend:
    return RestdBackend(str(clean_slurm.ensure_restd()))


def test_reads_match_the_cli_backend(clean_slurm, restd):
    c = clean_slurm
    running = c.submit("sleep 60", "-G", "3")
    c.submit("sleep 60", "-H", "-G", "1")
    c.submit("sleep 60", "-G", "2", "-p", "other", "--begin=now+3600")
    c.wait_for(running, "RUNNING")
    assert restd.ping()
    assert restd.nodes() == c.backend.nodes()
    by_id = {j.job_id: j for j in restd.jobs()}
    assert by_id == {j.job_id: j for j in c.backend.jobs()}
    assert by_id[running].gpus == 3 and by_id[running].state == "RUNNING"


def test_hold_release_priority_nodelist_begin_time(clean_slurm, restd):
    c = clean_slurm
    j = c.submit("sleep 60", "-G", "1", "--begin=now+3600")
    restd.set_priority(j, 4242)
    assert c.job(j).priority == 4242
    restd.hold(j)
    assert c.job(j).held and c.job(j).state_reason == "JobHeldAdmin"
    restd.release(j)
    assert not c.job(j).held and c.job(j).priority != 4242, "release recomputes the priority here too"
    restd.set_priority(j, 4242)
    restd.set_nodelist(j, ("node3", "node4"))
    pinned = c.job(j)
    assert pinned.required_nodes == ("node3", "node4") and pinned.num_nodes == 2 and pinned.priority == 4242
    restd.set_nodelist(j, ("node3",))
    assert c.job(j).num_nodes == 1
    restd.clear_begin_time(j)
    assert c.wait_for(j, "RUNNING", timeout=20).nodes == ("node3",)


SIGNAL_SCRIPT = """#!/bin/bash
child() { trap 'echo child >> sig-$SLURM_JOB_ID; exit 0' USR1; while :; do sleep 0.1; done; }
child &
trap 'echo shell >> sig-$SLURM_JOB_ID' USR1
echo ready >> sig-$SLURM_JOB_ID
while :; do sleep 0.1; done
"""


def test_signal_and_cancel(clean_slurm, restd):
    c = clean_slurm
    j = c.submit(SIGNAL_SCRIPT)
    marks = c.jobs_dir / f"sig-{j}"
    c.wait_for(j, "RUNNING")
    poll("the job's script ready", lambda: marks.exists() and "ready" in marks.read_text(), 20, 0.1)
    restd.signal(j, "SIGUSR1")
    poll("USR1 at the shell and the child", lambda: {"shell", "child"} <= set(marks.read_text().split()), 10, 0.1)
    restd.cancel(j)
    c.wait_for(j, "CANCELLED")


def test_errors(clean_slurm, restd, tmp_path):
    with pytest.raises(JobVanished):
        restd.hold(987654)
    with pytest.raises(JobVanished):
        restd.cancel(987654)
    with pytest.raises(SlurmError, match="requeue"):
        restd.requeue(1)
    with pytest.raises(SlurmError, match="AdminComment"):  # the controller's hold mark: CLI backend only
        restd.set_hold_mark(1, True)
    nowhere = RestdBackend(str(tmp_path / "no.sock"), timeout=2)
    with pytest.raises(SlurmUnreachable):
        nowhere.jobs()
    assert nowhere.ping() is False
