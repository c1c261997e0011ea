"""``tsbatch``: sbatch with teiresias checkpoint/resume.

Every sbatch option, the script and its arguments (or ``--wrap``) pass
through unchanged; tsbatch adds ``--requeue``, the time-limit warning
``--signal=B:USR2@<grace>``, the job comment ``teiresias:dir=<base>;...``
(the controller's way to find the job directory, wrappers/protocol.py; a
user comment is kept in it as ``note=``) and a batch script that arms the
in-job hooks (wrappers/batchscript.py). sbatch's own stdout, stderr and exit
code come back as they are.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from teiresias.errors import ConfigError, TeiresiasError
from wrappers import protocol
from wrappers.batchscript import JobSetup, NotABatchScript, header_lines, render, wrap_script
from wrappers.sbatch_args import Parsed, parse

HOOK_SITE = Path(__file__).resolve().parent / "hooks" / "site"
DEFAULT_GRACE = 90  # seconds; Slurm may deliver the warning up to a minute early

HELP = f"""\
Usage: tsbatch [TSBATCH OPTIONS] [SBATCH OPTIONS...] script [args...]
       tsbatch [TSBATCH OPTIONS] [SBATCH OPTIONS...] --wrap="command"

sbatch with teiresias checkpoint/resume: a PyTorch script saves its training
state when the scheduler preempts it or its time limit nears, and resumes
bitwise where it stopped after the requeue, without changing the script.
Everything else is sbatch: options, script, output and exit codes.

tsbatch options (before the script; they have no short forms):
      --checkpoint-dir=DIR    job base directory; the job's files go to
                              DIR/<jobid>, mode 0700 (default {protocol.DEFAULT_BASE})
      --checkpoint-every=N    also checkpoint every N optimizer steps (default 0: only
                              on preemption, time limit and SIGTERM)
      --no-checkpoint         submit through teiresias without the in-job hooks
      --profile, --no-profile profile the job's communication (TEIRESIAS_PROFILE);
                              sbatch's own --profile needs the form --profile=VALUE

tsbatch adds to sbatch: --requeue, --signal=B:{protocol.TIMELIMIT_SIGNAL}@<grace> (unless you
give --signal; grace from ${protocol.ENV_GRACE}, default {DEFAULT_GRACE} s) and
--comment=teiresias:dir=<DIR>;... (your --comment is kept in it as note=...).
Environment in the job: TEIRESIAS_START_FRESH=1 starts over when a checkpoint
is refused (corrupt or not yours). Details: docs/checkpointing.md

Example:
  tsbatch --checkpoint-dir=/shared/ckpt -p gpu --gres=gpu:1 -t 60 train.sh --lr 0.1

sbatch's own help follows.
"""


def _setup(p: Parsed, env: dict[str, str]) -> JobSetup:
    base = p.own.get("checkpoint-dir", protocol.DEFAULT_BASE)
    if not base:
        raise ConfigError("--checkpoint-dir needs a directory, e.g. --checkpoint-dir=/shared/ckpt")
    base = os.path.abspath(os.path.expanduser(base))
    if ";" in base or "\n" in base:
        raise ConfigError(f"--checkpoint-dir {base!r} must not contain ';' or a newline; choose another path")
    every_text = p.own.get("checkpoint-every", "0")
    if not every_text.isdigit():
        raise ConfigError(f"--checkpoint-every needs a whole number of steps >= 0, not {every_text!r}")
    grace_text = env.get(protocol.ENV_GRACE, str(DEFAULT_GRACE))
    if not grace_text.isdigit() or int(grace_text) < 1:
        raise ConfigError(f"{protocol.ENV_GRACE} must be a whole number of seconds >= 1, not {grace_text!r}")
    return JobSetup(
        hook_site=None if "no-checkpoint" in p.own else str(HOOK_SITE),
        base=base,
        every=int(every_text),
        profile="profile" in p.own and "no-profile" not in p.own,
        grace=int(grace_text),
    )


def build_comment(setup: JobSetup, user_comment: str | None) -> str:
    items = {"dir": setup.base, "profile": "1" if setup.profile else "0"}
    if setup.every:
        items["every"] = str(setup.every)
    if user_comment:
        items["note"] = quote(user_comment, safe=" /:,.-_@+")
    return protocol.format_comment(items)


def _header_words(script: str) -> list[str]:
    """The words of the script's ``#SBATCH`` lines (our command-line options override them)."""
    words: list[str] = []
    for line in header_lines(script):
        try:
            words += shlex.split(line.split("#SBATCH", 1)[1], comments=True)
        except ValueError:
            continue
    return words


def _option_value(words: list[str], long: str, short: str | None) -> str | None:
    value = None
    for k, w in enumerate(words):
        if w.startswith(long + "="):
            value = w.split("=", 1)[1]
        elif (w == long or w == short) and k + 1 < len(words):
            value = words[k + 1]
        elif short and w.startswith(short) and len(w) > len(short):
            value = w[len(short):]
    return value


def _has_option(words: list[str], long: str, short: str | None) -> bool:
    return _option_value(words, long, short) is not None


def _sbatch_help() -> str:
    """sbatch's own --help text; a note instead where sbatch cannot give it
    (not installed, or no slurm.conf on this machine)."""
    try:
        r = subprocess.run(["sbatch", "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"\n(sbatch's own help is unavailable here: {exc})\n"
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or ["no output"])[0]
        return f"\n(sbatch's own help is unavailable here: {first})\n"
    return r.stdout


def _sbatch(args: list[str], stdin: bytes | None = None) -> int:
    """Run sbatch with our stdout/stderr: its messages and exit code are the user's."""
    try:
        return subprocess.run(["sbatch", *args], input=stdin).returncode
    except FileNotFoundError:
        raise ConfigError("sbatch not found on PATH; load Slurm's client tools first") from None


def submit(argv: list[str], env: dict[str, str] | None = None) -> int:
    env = dict(os.environ) if env is None else env
    p = parse(argv)
    if p.help:
        sys.stdout.write(HELP)
        sys.stdout.write(_sbatch_help())
        return 0
    setup = _setup(p, env)
    if p.unknown is not None or (p.wrap is not None and p.script_args):
        # Not ours to judge: sbatch prints its own error (an unknown option, script
        # arguments with --wrap) or, for an option our table lacks, submits the
        # job as it is, without the hooks.
        rc = _sbatch(p.passthrough)
        if rc == 0 and p.unknown is not None:
            print(f"tsbatch: warning: option {p.unknown} unknown to tsbatch: submitted as plain sbatch, "
                  "without checkpoint hooks", file=sys.stderr)
        return rc
    if p.wrap is not None:
        text = wrap_script(p.wrap)
    elif p.script is None:
        text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    else:
        try:
            text = Path(p.script).read_bytes().decode("utf-8", "surrogateescape")
        except OSError:
            return _sbatch(p.passthrough)  # sbatch's own "Unable to open file" message
    try:
        generated = render(text, setup)
    except NotABatchScript:
        return _sbatch(p.passthrough, stdin=text.encode("utf-8", "surrogateescape") if p.script is None else None)
    header = _header_words(text)
    comment = p.comment if p.comment is not None else _option_value(header, "--comment", None)
    ours = ["--requeue", f"--comment={build_comment(setup, comment)}"]
    if not p.has_signal and not _has_option(header, "--signal", None):
        ours.append(f"--signal=B:{protocol.TIMELIMIT_SIGNAL}@{setup.grace}")
    # sbatch names a job after its script file; ours is a temporary file.
    named = (_has_option(p.sbatch_opts, "--job-name", "-J") or _has_option(header, "--job-name", "-J")
             or "SBATCH_JOB_NAME" in env)
    default_name = Path(p.script).name if p.script else ("wrap" if p.wrap is not None else "sbatch")
    name = [] if named else [f"--job-name={default_name}"]
    with tempfile.NamedTemporaryFile("w", prefix="tsbatch-", suffix=".sh", delete=False,
                                     encoding="utf-8", errors="surrogateescape") as f:
        f.write(generated)
        path = f.name
    try:
        return _sbatch([*ours, *name, *p.sbatch_opts, path, *p.script_args])
    finally:
        os.unlink(path)


def main(argv: list[str] | None = None) -> None:
    try:
        code = submit(sys.argv[1:] if argv is None else argv)
    except TeiresiasError as exc:
        print(f"tsbatch: error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
