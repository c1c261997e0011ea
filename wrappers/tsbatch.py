"""``tsbatch``: sbatch with teiresias checkpoint/resume.

Every sbatch option, the script and its arguments (or ``--wrap``) pass
through unchanged; tsbatch adds ``--requeue``, the time-limit warning
``--signal=B:USR2@<grace>``, the job comment ``teiresias:dir=<base>;key=<key>;...``
(the job's incarnation key names its control folder, teiresias/jobfiles.py; a
user comment is kept in it as ``note=``) and a batch script that arms the
in-job hooks (wrappers/batchscript.py). sbatch's own stdout, stderr and exit
code come back as they are.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

from teiresias.errors import ConfigError, TeiresiasError
from wrappers import profiling, protocol
from wrappers.batchscript import JobSetup, NotABatchScript, header_lines, render, wrap_script
from wrappers.gpu_count import gpu_request, requested_gpus
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
      --checkpoint-dir=DIR    job base directory; the job's checkpoints go to
                              DIR/<cluster>/<jobid>, mode 0700 (default {protocol.DEFAULT_BASE});
                              DIR, or the folder the job makes it in, must exist
      --checkpoint-every=N    also checkpoint every N optimizer steps (default 0: only
                              on preemption, time limit and SIGTERM)
      --no-checkpoint         submit through teiresias without the in-job hooks
      --app=NAME              the app (e.g. hyper-parameter search) this job belongs to, for
                              the themis policy's finish-time fairness (default: account
                              + job name stem; docs/themis.md)
      --iterations=N          the job's total optimizer steps: with the hooks' step times the
                              themis policy then knows the work left (default: unknown;
                              docs/themis.md)
      --elastic=MIN-MAX       the job may run on MIN..MAX GPUs: the controller grows it onto
                              idle GPUs and shrinks it when others need them (checkpoint and
                              restart at the new size); write the script for MAX ranks, the
                              hooks keep the global batch by gradient accumulation
                              (docs/gandiva.md)
      --profile, --no-profile profile the first run's communication for teiresias'
                              placement (default: on for a job of more than one GPU
                              whose model, its job name, the controller has not profiled
                              yet); sbatch's own --profile needs the form --profile=VALUE

tsbatch adds to sbatch: --requeue, --signal=B:{protocol.TIMELIMIT_SIGNAL}@<grace> (unless you
give --signal; grace from ${protocol.ENV_GRACE}, default {DEFAULT_GRACE} s) and
--comment=teiresias:dir=<DIR>;key=<KEY>;... (your --comment is kept in it as note=...).
The site's config ($TEIRESIAS_CONFIG, else {protocol.DEFAULT_CONFIG}) names the
spool where the job and the controller talk (spool_dir; docs/admin.md) and the
profile store the profiling default asks ($TEIRESIAS_PROFILE_STORE wins); the
choice is in the job comment as profile=1|0. Details: docs/profiler.md
Environment in the job: TEIRESIAS_START_FRESH=1 starts over when a checkpoint
is refused (corrupt or not yours). Details: docs/checkpointing.md

Example:
  tsbatch --checkpoint-dir=/shared/ckpt -p gpu --gres=gpu:1 -t 60 train.sh --lr 0.1
  tsbatch -J resnet50 -p gpu --gpus=4 -t 60 ddp.sh     # first run profiled (new model)

sbatch's own help follows.
"""


def _profile_flag(p: Parsed) -> bool | None:
    if "profile" in p.own and "no-profile" in p.own:
        raise ConfigError("give only one of --profile and --no-profile")
    if "profile" in p.own:
        return True
    return False if "no-profile" in p.own else None


def _profiling(p: Parsed, env: dict[str, str], header: list[str], job_name: str) -> tuple[bool, str | None]:
    """(profile the first run?, the interposer's path) per wrappers/profiling.py."""
    explicit = _profile_flag(p)
    gpus = requested_gpus(header, p.sbatch_opts, env)
    decision = profiling.decide(explicit, gpus, job_name, env)
    if not decision.profile:
        return False, None
    try:
        from profiler import ProfilerUnavailable, library_path

        return True, str(library_path())
    except ProfilerUnavailable as exc:
        if explicit:
            raise ConfigError(f"--profile: {exc}") from None
        print(f"tsbatch: warning: not profiling ({exc})", file=sys.stderr)
        return False, None


def _setup(p: Parsed, env: dict[str, str]) -> JobSetup:
    """Everything but the profiling decision (that needs the script's header)."""
    base = p.own.get("checkpoint-dir", protocol.DEFAULT_BASE)
    if not base:
        raise ConfigError("--checkpoint-dir needs a directory, e.g. --checkpoint-dir=/shared/ckpt")
    base = os.path.abspath(os.path.expanduser(base))
    if ";" in base or "\n" in base:
        raise ConfigError(f"--checkpoint-dir {base!r} must not contain ';' or a newline; choose another path")
    if "checkpoint-dir" in p.own:
        _check_base(base)
    every_text = p.own.get("checkpoint-every", "0")
    if not every_text.isdigit():
        raise ConfigError(f"--checkpoint-every needs a whole number of steps >= 0, not {every_text!r}")
    grace_text = env.get(protocol.ENV_GRACE, str(DEFAULT_GRACE))
    if not grace_text.isdigit() or int(grace_text) < 1:
        raise ConfigError(f"{protocol.ENV_GRACE} must be a whole number of seconds >= 1, not {grace_text!r}")
    _profile_flag(p)
    _app(p)
    _iterations(p)
    elastic = _elastic(p)
    site = protocol.config_path(env)
    if site.exists() and not os.access(site, os.R_OK):
        print(
            f"tsbatch: warning: cannot read the site's config {site}: the job runs without its spool, so the"
            " controller will not see its checkpoint answers; ask the admin to make it readable (mode 0644)",
            file=sys.stderr,
        )
    return JobSetup(
        hook_site=None if "no-checkpoint" in p.own else str(HOOK_SITE),
        base=base,
        every=int(every_text),
        profile=False,
        grace=int(grace_text),
        window=profiling.window_from_env(env),
        elastic=elastic,
        key=protocol.new_key(),
        spool=protocol.site_spool(env),
    )


def _check_base(base: str) -> None:
    """``--checkpoint-dir`` checked at submission, not found unusable by the job (which
    would then run without checkpoints): an existing folder we can write in, or a new
    one (the job creates it) inside an existing folder we can write in, not at the top
    of the file system. A missing parent, or a new top-level folder, is a typo or a
    shared file system that is not mounted here; the job must not create it."""
    path = Path(base)
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"--checkpoint-dir {base}: is not a folder; give a folder for the job files")
        folder = path
    else:
        folder = path.parent
        if folder == path or folder.parent == folder or not folder.is_dir():
            where = "a new top-level folder" if folder.parent == folder else f"its folder {folder} does not exist"
            raise ConfigError(
                f"--checkpoint-dir {base}: does not exist and {where} (a typo, or a file system not mounted "
                "here?); create it first, on a file system the compute nodes share"
            )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"--checkpoint-dir {base}: {folder} is not writable by you; choose another folder")


def _refuse_zero_gpus(header: list[str], opts: list[str], env: dict[str, str]) -> None:
    """``-G 0`` (or ``--gres=gpu:0``, ``--gpus-per-node=0``, ...) with no other GPUs: sbatch
    takes it as a job without GPUs, which teiresias would then schedule as a GPU job."""
    req = gpu_request(header, opts, env)
    zeros = [
        name
        for name, value in (
            ("-G 0", req.gpus),
            ("--gres=gpu:0", req.gres_per_node),
            ("--gpus-per-node=0", req.per_node),
            ("--gpus-per-task=0", req.per_task),
            ("--gpus-per-socket=0", req.per_socket),
        )
        if value == 0
    ]
    if zeros and req.total == 0:
        raise ConfigError(
            f"{zeros[0]} asks for no GPUs; give at least 1 (e.g. -G 1), or submit a job without GPUs with plain sbatch"
        )


def _app(p: Parsed) -> str:
    """``--app NAME`` checked: it goes into the job comment, whose items ';' and '=' separate."""
    app = p.own.get("app", "")
    if "app" in p.own and not _APP_NAME.fullmatch(app):
        raise ConfigError(f"--app {app!r}: use letters, digits, '.', '_' or '-' only, e.g. --app lr-search")
    return app


_APP_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _iterations(p: Parsed) -> int:
    """``--iterations N`` checked (0: not given)."""
    text = p.own.get("iterations", "0")
    if not text.isdigit() or ("iterations" in p.own and int(text) < 1):
        raise ConfigError(f"--iterations needs a whole number of optimizer steps >= 1, not {text!r}")
    return int(text)


def _elastic(p: Parsed) -> str:
    """``--elastic MIN-MAX`` checked, normalised ("" when not given)."""
    if "elastic" not in p.own:
        return ""
    try:
        e = protocol.parse_elastic(p.own["elastic"])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return f"{e.min_gpus}-{e.max_gpus}"


def build_comment(setup: JobSetup, user_comment: str | None, app: str = "", iterations: int = 0) -> str:
    items = {"dir": setup.base, "profile": "1" if setup.profile else "0"}
    if setup.key:
        items["key"] = setup.key  # the incarnation (teiresias/jobfiles.py): names its control folder
    if setup.every:
        items["every"] = str(setup.every)
    if app:
        items["app"] = app  # the themis app (controller/leases.py reads it back)
    if iterations:
        items["iters"] = str(iterations)  # themis' work left (controller/leases.py)
    if setup.elastic:
        items["elastic"] = setup.elastic  # Job.elastic for the gandiva policy's grow-shrink
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
            value = w[len(short) :]
    return value


def _has_option(words: list[str], long: str, short: str | None) -> bool:
    return _option_value(words, long, short) is not None


def _job_name(p: Parsed, header: list[str], env: dict[str, str]) -> str:
    """The Slurm job name: -J (command line, then #SBATCH; sbatch's precedence puts
    $SBATCH_JOB_NAME between them), else what sbatch would name it: the script's file name.
    It is also the model key the controller files profiles under."""
    given = _option_value(p.sbatch_opts, "--job-name", "-J")
    if given is None and env.get("SBATCH_JOB_NAME"):
        given = env["SBATCH_JOB_NAME"]
    if given is None:
        given = _option_value(header, "--job-name", "-J")
    if given is not None:
        return given
    return Path(p.script).name if p.script else ("wrap" if p.wrap is not None else "sbatch")


# sbatch (22.05) reads slurm.conf even for --help, --usage and --version: with
# none it prints four lines about DNS SRV lookups, and with SLURM_CONF naming a
# missing file it retries for a minute. Our own text never depends on Slurm;
# sbatch's follows it where sbatch can give it, else one line says why not.
_SBATCH_INFO_FLAGS = {"--usage": "usage", "--version": "version", "-V": "version"}


def _sbatch_info(flag: str, env: dict[str, str]) -> str:
    """sbatch's own output for an informational flag; a one-line note instead
    where sbatch cannot give it (not installed, no Slurm configuration)."""
    what = {"--help": "help", "--usage": "usage", "--version": "version", "-V": "version"}[flag]
    conf = env.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        return (
            f"(sbatch's own {what} is unavailable here: SLURM_CONF={conf} does not exist; "
            "point it at the cluster's slurm.conf)\n"
        )
    try:
        r = subprocess.run(["sbatch", flag], capture_output=True, text=True, timeout=10, env=env)
    except FileNotFoundError:
        return f"(sbatch's own {what} is unavailable here: sbatch is not on PATH)\n"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"(sbatch's own {what} is unavailable here: {exc})\n"
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        if any("configuration source" in ln or "configuration file" in ln for ln in lines):
            why = "no Slurm configuration found; set SLURM_CONF to the cluster's slurm.conf"
        else:
            why = next((ln for ln in lines if "fatal" in ln), lines[0] if lines else "no output")
        return f"(sbatch's own {what} is unavailable here: {why})\n"
    return r.stdout


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("teiresias")
    except PackageNotFoundError:
        return "unknown"


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
        sys.stdout.write(HELP + "\n")
        sys.stdout.flush()  # ours first, even while sbatch is slow to answer
        sys.stdout.write(_sbatch_info("--help", env))
        return 0
    info = [_SBATCH_INFO_FLAGS[o] for o in p.sbatch_opts if o in _SBATCH_INFO_FLAGS]
    if info and p.script is None and p.wrap is None:
        flag = "--version" if "version" in info else "--usage"
        sys.stdout.write(
            f"tsbatch (teiresias {_version()})\n" if flag == "--version" else "\n".join(HELP.splitlines()[:2]) + "\n"
        )
        sys.stdout.flush()
        sys.stdout.write(_sbatch_info(flag, env))
        return 0
    setup = _setup(p, env)
    if p.unknown is not None or (p.wrap is not None and p.script_args):
        # Not ours to judge: sbatch prints its own error (an unknown option, script
        # arguments with --wrap) or, for an option our table lacks, submits the
        # job as it is, without the hooks.
        rc = _sbatch(p.passthrough)
        if rc == 0 and p.unknown is not None:
            print(
                f"tsbatch: warning: option {p.unknown} unknown to tsbatch: submitted as plain sbatch, "
                "without checkpoint hooks",
                file=sys.stderr,
            )
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
    header = _header_words(text)
    _refuse_zero_gpus(header, p.sbatch_opts, env)
    job_name = _job_name(p, header, env)
    profile, lib = _profiling(p, env, header, job_name)
    setup = replace(setup, profile=profile, profile_lib=lib)
    try:
        generated = render(text, setup)
    except NotABatchScript:
        return _sbatch(p.passthrough, stdin=text.encode("utf-8", "surrogateescape") if p.script is None else None)
    comment = p.comment if p.comment is not None else _option_value(header, "--comment", None)
    ours = ["--requeue", f"--comment={build_comment(setup, comment, _app(p), _iterations(p))}"]
    if not p.has_signal and not _has_option(header, "--signal", None):
        ours.append(f"--signal=B:{protocol.TIMELIMIT_SIGNAL}@{setup.grace}")
    # sbatch names a job after its script file; ours is a temporary file.
    named = (
        _has_option(p.sbatch_opts, "--job-name", "-J")
        or _has_option(header, "--job-name", "-J")
        or "SBATCH_JOB_NAME" in env
    )
    name = [] if named else [f"--job-name={job_name}"]
    with tempfile.NamedTemporaryFile(
        "w", prefix="tsbatch-", suffix=".sh", delete=False, encoding="utf-8", errors="surrogateescape"
    ) as f:
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
