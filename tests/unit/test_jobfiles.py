"""The job-files contract (teiresias/jobfiles.py): the job comment parsed once
into a typed field of the controller's job record, and the old module name
(wrappers/protocol.py) still serving the job-side API docs/checkpointing.md names."""

from __future__ import annotations

from pathlib import Path

from slurm_plugin.controller.state import JobRecord
from teiresias import jobfiles
from wrappers.tsbatch import JobSetup, build_comment


def test_a_tsbatch_comment_becomes_typed_fields() -> None:
    c = build_comment(JobSetup(None, "/b", 5, True, 90), "a;b=c d", app="lr-search", iterations=500)
    got = jobfiles.job_comment(c)
    assert (got.dir, got.profile, got.app, got.iterations) == ("/b", True, "lr-search", 500)
    assert dict(got.items)["every"] == "5" and "note" in dict(got.items)
    assert got.job_dir(42) == Path("/b/42")


def test_a_foreign_comment_has_no_job_files() -> None:
    for comment in ("", "user text", "teiresias:", "teiresias:profile=1"):
        got = jobfiles.job_comment(comment)
        assert got.dir == "" and got.job_dir(7) is None and got.iterations == 0
    assert jobfiles.job_comment("teiresias:dir=/b;iters=lots").iterations == 0


def test_the_record_field_follows_the_comment_and_parses_each_text_once() -> None:
    rec = JobRecord(job_id=3, comment="teiresias:dir=/x;app=a")
    first = rec.files
    assert first.app == "a" and rec.files is first  # cached per text, not parsed per read
    rec.comment = "teiresias:dir=/y;profile=1"  # reconcile updates the comment in place
    assert rec.files.dir == "/y" and rec.files.profile and rec.files.app == ""


def test_the_old_module_name_serves_the_job_side_api() -> None:
    from wrappers import protocol

    for name in (
        "Ack",
        "read_ack",
        "write_ack",
        "job_dir",
        "parse_comment",
        "mark_run_started",
        "preempt_requested",
        "CheckpointRecord",
        "RunRecord",
        "UsageSample",
        "ENV_BASE",
    ):
        assert getattr(protocol, name) is getattr(jobfiles, name), name
