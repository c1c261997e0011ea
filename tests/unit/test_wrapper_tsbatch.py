"""tsbatch's pure parts: the command-line split and the generated batch
script (golden file, paths relative to this file)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import poll
from wrappers.batchscript import JobSetup, NotABatchScript, header_lines, render, wrap_script
from wrappers.sbatch_args import parse
from wrappers.tsbatch import build_comment

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parent / "fixtures" / "train_scripts" / "tsbatch_golden.sh"
USER_SCRIPT = """#!/bin/bash
#SBATCH -p gpu
# a plain comment

#SBATCH --gres=gpu:1   # trailing comment
python train.py "$@"
#SBATCH --not-a-directive-after-a-command
"""
SETUP = JobSetup(
    hook_site="/opt/teiresias/wrappers/hooks/site",
    base="/shared/ckpt",
    every=0,
    profile=False,
    grace=90,
    key="0123456789abcdef",
)


def test_generated_script_matches_golden_file():
    got = render(USER_SCRIPT, SETUP)
    if os.environ.get("TEIRESIAS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), (
        "the generated batch script changed; if intended, rerun with TEIRESIAS_UPDATE_GOLDEN=1 "
        f"and review the diff of {GOLDEN.relative_to(HERE.parent.parent)}"
    )


def test_generated_script_is_valid_bash_and_embeds_script_verbatim():
    got = render(USER_SCRIPT, SETUP)
    assert subprocess.run(["bash", "-n"], input=got, text=True).returncode == 0
    assert USER_SCRIPT in got
    assert got.splitlines()[1:3] == ["#SBATCH -p gpu", "#SBATCH --gres=gpu:1   # trailing comment"]


def test_no_checkpoint_leaves_pythonpath_alone():
    got = render(USER_SCRIPT, JobSetup(None, "/b", 0, False, 90))
    assert "PYTHONPATH" not in got and "export TEIRESIAS_CHECKPOINT=0" in got


def test_header_lines_stop_at_first_command():
    assert header_lines(USER_SCRIPT) == ["#SBATCH -p gpu", "#SBATCH --gres=gpu:1   # trailing comment"]


def test_not_a_batch_script():
    with pytest.raises(NotABatchScript):
        render("echo no shebang\n", SETUP)


def test_wrap_matches_sbatch():
    assert wrap_script("hostname") == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\nhostname\n"


@pytest.mark.parametrize(
    "argv, script, args, opts, own",
    [
        (["-p", "gpu", "s.sh", "-p", "x"], "s.sh", ["-p", "x"], ["-p", "gpu"], {}),
        (
            ["--checkpoint-dir", "/c", "-N2", "--time=5", "s.sh"],
            "s.sh",
            [],
            ["-N2", "--time=5"],
            {"checkpoint-dir": "/c"},
        ),
        (["--part", "gpu", "--", "s.sh", "--x"], "s.sh", ["--x"], ["--part", "gpu"], {}),
        (["-Hk", "-J", "n", "--exclusive", "s.sh"], "s.sh", [], ["-Hk", "-J", "n", "--exclusive"], {}),
        (["--profile", "--profile=task", "s.sh"], "s.sh", [], ["--profile=task"], {"profile": "1"}),
        (
            ["--checkpoint-every=7", "--no-checkpoint", "s.sh"],
            "s.sh",
            [],
            [],
            {"checkpoint-every": "7", "no-checkpoint": "1"},
        ),
    ],
)
def test_parse_splits_like_getopt(argv, script, args, opts, own):
    p = parse(argv)
    assert (p.script, p.script_args, p.sbatch_opts, p.own, p.unknown) == (script, args, opts, own, None)


def test_parse_unknown_option_defers_to_sbatch():
    p = parse(["--checkpoint-dir=/c", "--bogus", "x", "s.sh"])
    assert p.unknown == "--bogus" and p.passthrough == ["--bogus", "x", "s.sh"]


def test_parse_wrap_and_comment_are_reemitted():
    p = parse(["--wrap", "echo hi", "--comment=mine", "-o", "x.out"])
    assert (p.wrap, p.comment, p.script, p.sbatch_opts) == ("echo hi", "mine", None, ["-o", "x.out"])


def test_comment_keeps_user_text_and_is_parseable():
    from wrappers.protocol import parse_comment

    c = build_comment(JobSetup(None, "/b", 5, True, 90), "a;b=c d")
    assert parse_comment(c) == {"dir": "/b", "profile": "1", "every": "5", "note": "a%3Bb%3Dc d"}


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="needs Slurm's sbatch (scripts/bootstrap.sh installs it)")
@pytest.mark.parametrize("cmd", [["tsbatch", "--help"], ["teiresias", "sbatch", "--help"]])
def test_help_lists_own_options_above_sbatchs(cmd, tmp_path):
    exe = str(Path(sys.executable).with_name(cmd[0]))
    conf = tmp_path / "slurm.conf"  # sbatch --help reads a slurm.conf; no cluster needed
    conf.write_text("ClusterName=help\nSlurmctldHost=localhost\n")
    r = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, env={**os.environ, "SLURM_CONF": str(conf)})
    assert r.returncode == 0
    assert r.stdout.index("--checkpoint-dir") < r.stdout.index("Usage: sbatch") < r.stdout.index("--account")
    assert "Example:" in r.stdout


def test_help_without_sbatch_still_succeeds(tmp_path):
    exe = str(Path(sys.executable).with_name("tsbatch"))
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, env={**os.environ, "PATH": str(tmp_path)})
    assert r.returncode == 0 and "--checkpoint-dir" in r.stdout
    assert "sbatch's own help is unavailable here" in r.stdout


CHILD = """#!{python}
import pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGUSR2, lambda s, f: open(d / "got", "a").write("usr2\\n"))
signal.signal(signal.SIGUSR1, lambda s, f: open(d / "got", "a").write("usr1\\n"))
(d / "ready").write_text("")
while not (d / "stop").exists():
    time.sleep(0.02)
print("child done", flush=True)
sys.exit(7)
"""


def test_batch_shell_survives_and_forwards_each_signal_once(tmp_path):
    """The generated script run by bash, as slurmstepd runs it: USR1 and USR2 sent
    to the batch shell alone reach the child exactly once each (the shell must
    not signal itself: its trap would loop), the shell survives them, and its exit
    code is the child's."""
    import signal

    script = render(CHILD.format(python=sys.executable), JobSetup(None, str(tmp_path), 0, False, 90))
    (tmp_path / "batch.sh").write_text(script)
    proc = subprocess.Popen(
        ["bash", str(tmp_path / "batch.sh"), str(tmp_path)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        poll("the child", (tmp_path / "ready").exists, 20, 0.02)
        for sig, word in ((signal.SIGUSR2, "usr2"), (signal.SIGUSR1, "usr1")):
            proc.send_signal(sig)
            poll(
                f"{word} at the child",
                lambda word=word: (tmp_path / "got").exists() and word in (tmp_path / "got").read_text(),
                20,
                0.02,
            )
        (tmp_path / "stop").write_text("")
        assert proc.wait(timeout=20) == 7
        assert proc.stdout.read() == "child done\n"
        assert (tmp_path / "got").read_text() == "usr2\nusr1\n"
    finally:
        (tmp_path / "stop").write_text("")  # the child (own session) ends by itself
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


ENDS_ON_USR1 = """#!{python}
import os, pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGUSR1, lambda s, f: os._exit(0))  # its last step was done: it ends now
(d / "ready").write_text("")
while True:
    time.sleep(0.02)
"""


def test_a_job_ending_while_the_shell_handles_usr1_exits_0(tmp_path):
    """Issue 20 B2: a preemption signal that comes as the job ends. The shell's
    trap forwards USR1 and the child ends (exit 0) while the trap still runs; the
    interrupted ``wait`` said 138 (128 + USR1), and the job ended FAILED 138."""
    import signal

    setup = JobSetup(str(HERE), str(tmp_path / "jobs"), 0, False, 90)  # hooks on: the trap also acks
    (tmp_path / "batch.sh").write_text(render(ENDS_ON_USR1.format(python=sys.executable), setup))
    proc = subprocess.Popen(
        ["bash", str(tmp_path / "batch.sh"), str(tmp_path)],
        env={**os.environ, "SLURM_JOB_ID": "7", "TEIRESIAS_CHECKPOINT": "0"},
        start_new_session=True,
    )
    try:
        poll("the child", (tmp_path / "ready").exists, 20, 0.02)
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
