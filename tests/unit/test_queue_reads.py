"""What `teiresias queue` and `explain` read, and what they import (issue 24 B).

They read the controller's state DB through a read-only connection
(controller/stateview.py) instead of copying the whole file, and ask Slurm one
small squeue (cli/live.py); modules of the controller's loop are not imported to
print a table. The live behaviour (states, privacy under PrivateData) is tested
against a real Slurm in tests/slurm/test_controller_ops_live.py and
tests/slurm/test_explain_live.py.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

from slurm_plugin.cli.live import LIVE_FORMAT, SEP, parse_live
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from slurm_plugin.controller.stateview import StateView
from teiresias.domain import Placement
from tests.conftest import REPO


def _db(tmp_path):
    db = tmp_path / "state.db"
    s = StateStore(db)
    with s.transaction():
        s.save_job(JobRecord(job_id=1, user="a", name="x", gpus=2, phase=Phase.RUNNING, run_start=5.0))
        s.save_job(JobRecord(job_id=2, user="b", gpus=1, phase=Phase.STARTING, planned=Placement.of([("node1", 1)])))
        s.save_job(JobRecord(job_id=3, user="a", phase=Phase.FINISHED, final_state="COMPLETED"))
        s.set_meta("explain", json.dumps({"round": 7}))
    return db, s


def test_state_view_reads_what_the_store_holds_without_copying_it(tmp_path):
    db, store = _db(tmp_path)  # the controller keeps it open (WAL) while queue reads
    copy = StateStore(db, readonly_copy=True)
    with StateView(db) as v:
        assert v.jobs() == copy.jobs() and set(v.jobs()) == {1, 2}
        assert v.jobs(active_only=False) == copy.jobs(active_only=False)
        assert set(v.jobs(also=(3,))) == {1, 2, 3}
        assert v.get_meta("explain") == copy.get_meta("explain") and v.get_meta("nope", "d") == "d"
    store.close()


def test_state_view_reads_a_db_written_before_newer_columns(tmp_path):
    db, store = _db(tmp_path)
    store.close()
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE jobs DROP COLUMN lost_gpu_seconds")
    con.execute("ALTER TABLE jobs DROP COLUMN pinned_nodes")
    con.commit()
    con.close()
    with StateView(db) as v:
        jobs = v.jobs()
    assert jobs[1].lost_gpu_seconds == 0.0 and jobs[1].pinned_nodes == "" and jobs[1].gpus == 2
    assert jobs[2].planned == Placement.of([("node1", 1)])


def test_live_squeue_lines_parse_to_state_and_nodes():
    text = "".join(
        f"{j}{SEP}{state}{SEP}{ran}{SEP}{req}\x1e\n"
        for j, state, ran, req in ((7, "RUNNING", "node[1-2]", ""), (8, "PENDING", "", "node3"), (9, "PENDING", "", ""))
    )
    jobs = parse_live(text)
    assert (jobs[7].state, jobs[7].nodes) == ("RUNNING", ("node1", "node2"))
    assert jobs[8].nodes == ("node3",) and jobs[9].nodes == ()
    assert LIVE_FORMAT.count(SEP) == 3


def test_queue_and_explain_import_nothing_of_the_controller_loop(tmp_path):
    """A command that prints a table should not pay for the round's modules: on cb951f8
    `teiresias queue` imported slicing, leases, reconcile and the SJF-BSBF policy
    (with squeue --json, ~0.6 s of its ~0.8 s at 1,000 jobs)."""
    db, store = _db(tmp_path)
    store.close()
    cfg = tmp_path / "teiresias.yaml"
    cfg.write_text(f"state_db: {db}\naudit_log: {tmp_path / 'audit.jsonl'}\npartitions: [gpu]\n")
    code = (
        "import sys\n"
        "from teiresias.cli import cli\n"
        "for cmd in (['queue', '--no-slurm'], ['explain', '1', '--no-slurm']):\n"
        f"    cli.main([*cmd, '-c', {str(cfg)!r}], standalone_mode=False)\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    loaded = set(r.stderr.split())
    heavy = {
        "slurm_plugin.controller.loop",
        "slurm_plugin.controller.reconcile",
        "slurm_plugin.controller.slicing",
        "slurm_plugin.controller.leases",
        "slurm_plugin.controller.sharing",
        "slurm_plugin.controller.runtime",
        "slurm_plugin.backends.cli",
        "teiresias.policy.sjf_bsbf",
        "numpy",
    }
    assert not heavy & loaded, sorted(heavy & loaded)
    assert "JOBID" in r.stdout and "job 1 runs" in r.stdout
