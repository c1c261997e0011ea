"""tsbatch as a drop-in for sbatch on the real local cluster: a script without
torch runs exactly as with sbatch, bad input gets sbatch's own answer or one
clear line, an unusable checkpoint directory costs one warning and nothing else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.test_wrapper_resume import submitted, train_job, tsbatch  # noqa: F401 (fixture)
from tests.torch.jobs import same_weights
from wrappers import protocol

pytestmark = pytest.mark.slurm

NO_TORCH_SH = """#!/bin/bash
#SBATCH --job-name=same-as-sbatch
echo "args: $# [$1] [$2]"
echo "to stderr" >&2
printf 'line %s\\n' 1 2 3
exit 3
"""

NO_TORCH_PY = f"""#!{sys.executable}
import sys
print("argv", sys.argv[1:])
print("torch loaded:", "torch" in sys.modules)
"""


def sbatch(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sbatch", *args], env=cluster.env, capture_output=True, text=True, timeout=60)


def run_both(cluster, tmp_path: Path, script_text: str, *args: str) -> tuple[str, str, object, object]:
    script = tmp_path / "job.sh"
    script.write_text(script_text)
    script.chmod(0o755)
    out_a, out_b = tmp_path / "plain.out", tmp_path / "wrapped.out"
    a = submitted(sbatch(cluster, f"--output={out_a}", str(script), *args))
    b = submitted(tsbatch(cluster, f"--checkpoint-dir={tmp_path / 'ck'}", f"--output={out_b}", str(script), *args))
    ja = cluster.wait_for(a, {"COMPLETED", "FAILED"}, timeout=60)
    jb = cluster.wait_for(b, {"COMPLETED", "FAILED"}, timeout=60)
    return out_a.read_text(), out_b.read_text(), ja, jb


def test_script_without_torch_runs_exactly_as_with_sbatch(clean_slurm, tmp_path):
    plain, wrapped, ja, jb = run_both(clean_slurm, tmp_path, NO_TORCH_SH, "one", "two words")
    assert plain == wrapped
    assert "args: 2 [one] [two words]" in wrapped
    assert (ja.state, ja.name) == (jb.state, jb.name) == ("FAILED", "same-as-sbatch")
    shown = [
        subprocess.run(
            ["scontrol", "show", "job", "-o", str(j.job_id)], env=clean_slurm.env, capture_output=True, text=True
        ).stdout
        for j in (ja, jb)
    ]
    assert ["ExitCode=3:0" in s for s in shown] == [True, True]


def test_python_without_torch_same_output(clean_slurm, tmp_path):
    plain, wrapped, ja, jb = run_both(clean_slurm, tmp_path, NO_TORCH_PY, "x")
    assert plain == wrapped and "torch loaded: False" in wrapped
    assert ja.state == jb.state == "COMPLETED"


def test_wrap_same_output(clean_slurm, tmp_path):
    out_a, out_b = tmp_path / "a.out", tmp_path / "b.out"
    cmd = "echo wrapped $((6*7)); echo err >&2"
    a = submitted(sbatch(clean_slurm, f"--output={out_a}", f"--wrap={cmd}"))
    # A job folder of its own: under the default base (~/.teiresias/jobs/<ClusterName>) an id
    # another test cluster of this session used has a folder, set aside with a line of its own.
    b = submitted(tsbatch(clean_slurm, f"--checkpoint-dir={tmp_path / 'ck'}", f"--output={out_b}", "--wrap", cmd))
    ja = clean_slurm.wait_for(a, "COMPLETED", timeout=60)
    jb = clean_slurm.wait_for(b, "COMPLETED", timeout=60)
    assert out_a.read_text() == out_b.read_text() == "wrapped 42\nerr\n"
    assert ja.name == jb.name == "wrap"


def test_unknown_option_gets_sbatchs_own_error(clean_slurm, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    for bad in (["--checkpoint-dri=/x"], ["--no-such-option"], ["-Z"]):
        a = sbatch(clean_slurm, *bad, str(script))
        b = tsbatch(clean_slurm, *bad, str(script))
        assert (b.returncode, b.stdout, b.stderr) == (a.returncode, a.stdout, a.stderr)
        assert a.returncode != 0 and "sbatch" in a.stderr


def test_bad_tsbatch_values_are_one_clear_line(clean_slurm, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    for bad, word in ((["--checkpoint-every=soon"], "--checkpoint-every"), (["--checkpoint-dir=/a;b"], "';'")):
        r = tsbatch(clean_slurm, *bad, str(script))
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("tsbatch: error:") and word in r.stderr
    assert clean_slurm.active_jobs() == []


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["-G", "0"], "-G 0 asks for no GPUs"),
        (["--gres=gpu:0"], "--gres=gpu:0 asks for no GPUs"),
        (["--checkpoint-dir=/nonexistent"], "--checkpoint-dir /nonexistent: does not exist and a new top-level folder"),
        (["--checkpoint-dir=/nonexistent/ck"], "its folder /nonexistent does not exist"),
        (["--checkpoint-dir=/etc/hostname"], "--checkpoint-dir /etc/hostname: is not a folder"),
    ],
)
def test_a_job_without_gpus_or_checkpoint_folder_is_refused_at_submission(clean_slurm, tmp_path, args, problem):
    """Issue 23 item 10: sbatch takes -G 0 as a job without GPUs and the job would make
    a missing checkpoint folder (or run without checkpoints): both were submitted."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    r = tsbatch(clean_slurm, *args, str(script))
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("tsbatch: error:") and problem in r.stderr
    assert clean_slurm.active_jobs() == [] and not Path("/nonexistent").exists()


def test_missing_script_gets_sbatchs_own_error(clean_slurm, tmp_path):
    a = sbatch(clean_slurm, str(tmp_path / "nope.sh"))
    b = tsbatch(clean_slurm, str(tmp_path / "nope.sh"))
    assert (b.returncode, b.stderr) == (a.returncode, a.stderr) and a.returncode != 0


@pytest.mark.torch
def test_unwritable_checkpoint_dir_one_warning_job_runs(clean_slurm, tmp_path, reference):  # noqa: F811
    # A folder that is fine at submission (tsbatch refuses a bad one then) and a file
    # by the time the job starts: the job cannot make its directory there.
    blocker = tmp_path / "a-file"
    blocker.mkdir()
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    job = submitted(
        tsbatch(
            clean_slurm,
            "--hold",
            f"--checkpoint-dir={blocker}/ck",
            "--checkpoint-every=3",
            f"--output={log}",
            str(train_job(tmp_path, "train_plain.py", out)),
            env={"OMP_NUM_THREADS": "1"},
        )
    )
    blocker.rmdir()
    blocker.write_text("")
    clean_slurm.backend.release(job)
    clean_slurm.wait_for(job, "COMPLETED", timeout=120)
    lines = [ln for ln in log.read_text().splitlines() if "teiresias" in ln]
    assert len(lines) == 1 and "warning: checkpoints disabled" in lines[0] and str(blocker) in lines[0]
    assert same_weights(reference, out)


def test_user_comment_and_options_pass_through(clean_slurm, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --comment=from-header\nsleep 30\n")
    job = submitted(tsbatch(clean_slurm, "-J", "named", "--hold", f"--checkpoint-dir={tmp_path}", str(script)))
    j = clean_slurm.job(job)
    assert j.name == "named" and j.held and j.requeue
    key = protocol.parse_comment(j.comment).get("key", "")
    assert j.comment == f"teiresias:dir={tmp_path};profile=0;key={key};note=from-header" and protocol.valid_key(key)
