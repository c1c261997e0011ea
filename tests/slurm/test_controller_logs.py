"""The controller's log as an admin reads it (issue 21 item 5, docs/admin.md
"Logs"): one dated line per event with its level, nothing twice on stdout;
under systemd's journal syslog priorities instead of a second timestamp; a
crash is one line naming the file that holds its traceback."""

from __future__ import annotations

import os
import re
import resource
import subprocess

import pytest

from tests.helpers import poll
from tests.slurm.controller_support import TEIRESIAS, ControllerProc, submit_sleep

pytestmark = pytest.mark.slurm

DATED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} teiresias (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def test_the_daemon_logs_each_decision_once_on_a_dated_line(cluster, make_controller):
    ctl = make_controller().start()
    job = submit_sleep(cluster, 1, 30)
    poll("the start", lambda: f"[job {job}] start" in ctl.logtext(), 60)
    ctl.stop()
    lines = ctl.logtext().splitlines()
    assert lines and all(DATED.match(line) for line in lines), lines
    assert sum(f"[job {job}] start" in line for line in lines) == 1, lines
    assert not any(line.startswith("round ") for line in lines), lines


def test_under_the_journal_a_line_carries_its_priority_and_no_timestamp(cluster, tmp_path):
    ctl = ControllerProc(tmp_path, cluster)
    log = tmp_path / "journal"
    with open(log, "wb") as f:
        st = os.fstat(f.fileno())
        r = subprocess.run(
            [*TEIRESIAS, "controller", "run", "-c", str(ctl.config), "--once", "-v"],
            env={**cluster.env, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"},
            stdout=subprocess.DEVNULL,
            stderr=f,
            timeout=60,
        )
    assert r.returncode == 0
    lines = log.read_text().splitlines()
    assert lines and all(re.match(r"^<[2-7]>(DEBUG|INFO|WARNING|ERROR|CRITICAL) ", line) for line in lines), lines


def test_a_crash_is_one_line_naming_the_file_with_its_traceback(cluster, tmp_path):
    """A real fault: too few file descriptors to start scontrol (EMFILE)."""
    ctl = ControllerProc(tmp_path, cluster)

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (14, 14))

    r = subprocess.run(
        [*TEIRESIAS, "controller", "run", "-c", str(ctl.config), "--once"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=few_files,
    )
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "controller crashed: OSError" in lines[0], r.stderr
    path = lines[0].rsplit("traceback in ", 1)[1]
    assert "Traceback" in open(path).read() and "Too many open files" in open(path).read()
