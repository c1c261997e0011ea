"""tsbatch --elastic MIN-MAX (Gandiva §3.3) and the slice records: the pure parts.
The in-job behaviour is tested with real torch in tests/torch/test_hooks_elastic.py
and tests/torch/test_hooks_suspend.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wrappers.batchscript import render
from wrappers.hooks.accumulate import elastic_steps
from wrappers.protocol import Elastic, SliceRecord, append_slice, parse_comment, parse_elastic, read_slices
from wrappers.sbatch_args import parse
from wrappers.tsbatch import _setup, build_comment


def test_elastic_goes_into_the_comment_and_the_job_environment():
    p = parse(["--elastic", "1-4", "-G", "4", "job.sh"])
    setup = _setup(p, {})
    assert setup.elastic == "1-4"
    assert parse_comment(build_comment(setup, None))["elastic"] == "1-4"
    assert "export TEIRESIAS_ELASTIC=1-4" in render("#!/bin/bash\npython t.py\n", setup)
    plain = _setup(parse(["job.sh"]), {})
    assert "elastic" not in parse_comment(build_comment(plain, None))
    assert "TEIRESIAS_ELASTIC" not in render("#!/bin/bash\npython t.py\n", plain)


@pytest.mark.parametrize("text,want", [("1-4", Elastic(1, 4)), ("2", Elastic(2, 2)), ("2-8", Elastic(2, 8))])
def test_parse_elastic(text, want):
    assert parse_elastic(text) == want


@pytest.mark.parametrize("bad", ["0-2", "4-2", "a-b", "", "1-"])
def test_bad_elastic_is_refused_in_one_line(bad, tmp_path):
    with pytest.raises(ValueError, match="--elastic expects"):
        parse_elastic(bad)
    exe = str(Path(sys.executable).with_name("tsbatch"))
    r = subprocess.run(
        [exe, f"--elastic={bad}", "--wrap", "true"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path)},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--elastic expects" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_accumulation_keeps_the_global_batch():
    e = Elastic(1, 4)
    assert [e.accumulation(w) for w in (1, 2, 4)] == [4, 2, 1]
    with pytest.raises(ValueError, match="do not divide"):
        e.accumulation(3)
    assert elastic_steps({"TEIRESIAS_ELASTIC": "1-4", "WORLD_SIZE": "2"}) == 2
    assert elastic_steps({"WORLD_SIZE": "2"}) == 1
    assert elastic_steps({"TEIRESIAS_ELASTIC": "1-4", "WORLD_SIZE": "3"}) == 1  # warned, not grouped


def test_slice_records_round_trip_and_torn_lines_are_skipped(tmp_path):
    rec = SliceRecord(job_id=3, restart_count=0, step=7, signalled=1.0, parked=1.5, resumed=4.0, offloaded_bytes=0)
    append_slice(tmp_path, rec)
    with open(tmp_path / "slices.jsonl", "a") as f:
        f.write('{"job_id": 3, "ste')
    assert read_slices(tmp_path) == [rec]
    assert read_slices(tmp_path / "missing") == []
