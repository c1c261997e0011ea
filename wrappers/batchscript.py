"""The batch script tsbatch submits in place of the user's.

It keeps the user's ``#SBATCH`` header (so their options apply), embeds the
user's script byte for byte (sbatch's semantics: what runs is what was
submitted), and runs it as a child with the teiresias environment. The batch
shell itself only has to stay alive:

- ``scancel --signal=USR1 --full`` reaches the batch shell and every child. A
  bash without a trap dies of USR1 (and the job with it), so the traps are
  the script's first commands, and the child runs with USR1/USR2 *ignored*
  (inherited through exec); Python's hooks install their own handlers when
  torch is imported, so only they act on them. A USR1 that comes before any
  process of the run has started training is acknowledged by this shell
  ("nothing new to save") and recorded for the hooks (``signal_lines``).
- The time-limit warning (``--signal=B:USR2@grace``) reaches only this shell:
  it forwards USR1/USR2 to all its descendants.
- A profiled job (tsbatch ``--profile``, or its default for a new multi-GPU
  model) gets the communication profiler on its *first run only*
  (``SLURM_RESTART_COUNT`` unset or 0; Tiresias §3.3.1 profiles a job once):
  the interposer appended to ``LD_PRELOAD``, ``TEIRESIAS_PROFILE_DIR`` =
  ``<control folder>/profile`` (teiresias/jobfiles.py; the job id is only
  known at run time) and the window settings. A library missing on the node
  costs one warning line, never the job.
- On SIGTERM (cancel, requeue, time limit) the shell keeps waiting, until the
  child and everything in its process group (a Python still saving after its
  parent shell ended) are gone; Slurm's SIGKILL after KillWait still bounds it.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field

from profiler.env import (
    ENV_DIR,
    ENV_ITERS,
    ENV_MAX_BYTES,
    ENV_SECONDS,
    PROFILE_SUBDIR,
    ProfileWindow,
)


class NotABatchScript(ValueError):
    """The text cannot be a batch script (sbatch would refuse it too)."""


@dataclass(frozen=True)
class JobSetup:
    hook_site: str | None  # folder with sitecustomize.py; None: hooks off (--no-checkpoint)
    base: str  # job base directory (absolute)
    every: int
    profile: bool
    grace: int
    profile_lib: str | None = None  # the interposer (profiler.library_path()); needed when profile
    window: ProfileWindow = field(default_factory=ProfileWindow)
    elastic: str = ""  # "MIN-MAX" (tsbatch --elastic): exported for the hooks' accumulation
    key: str = ""  # the incarnation key (jobfiles.new_key(); "" only in tests of the old layout)
    spool: str = ""  # the site's spool_dir (teiresias.yaml); "": the job directory is the control folder


def header_lines(script: str) -> list[str]:
    """The ``#SBATCH`` directives sbatch reads: comment lines after the
    shebang up to the first command (blank lines allowed)."""
    out = []
    for line in script.splitlines()[1:]:
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if stripped.startswith("#SBATCH"):
            out.append(line.rstrip())
    return out


def wrap_script(command: str) -> str:
    """What ``sbatch --wrap`` submits (src/sbatch/opt.c)."""
    return f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n"


def profiling_lines(setup: JobSetup) -> list[str]:
    """Shell lines turning the profiler on for the job's first run (module docstring)."""
    if not setup.profile_lib:
        raise ValueError("a profiled JobSetup needs profile_lib (profiler.library_path())")
    lib = shlex.quote(setup.profile_lib)
    pdir = f'"$TEIRESIAS_CONTROL_DIR/{PROFILE_SUBDIR}"'
    w = setup.window
    return [
        "# the first run only: the communication profiler (docs/profiler.md)",
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then',
        f"  if [ -r {lib} ]; then",
        f'    export LD_PRELOAD="${{LD_PRELOAD:+$LD_PRELOAD:}}"{lib}',
        f"    export {ENV_DIR}={pdir}",
        (
            f"    export {ENV_SECONDS}={float(w.seconds)!r} {ENV_ITERS}={int(w.iterations)}"
            f" {ENV_MAX_BYTES}={int(w.max_bytes)}"
        ),
        "  else",
        (
            f'    echo "teiresias: warning: profiler library "{lib}" missing on $(hostname);'
            ' this run is not profiled" >&2'
        ),
        "    export TEIRESIAS_PROFILE=0",
        "  fi",
        "else",
        f"  export TEIRESIAS_PROFILE=0; unset {ENV_DIR}  # a requeued run: profiled already",
        "fi",
    ]


def dir_lines(setup: JobSetup) -> list[str]:
    """``__ts_dirs``: this incarnation's folders, named once (teiresias/jobfiles.py,
    "Where a job's files live"), by the first of the USR1 trap and the script's
    own call. The job directory is ``<base>/<cluster>/<id>`` with the key that
    owns it in ``key``: a folder of an earlier job with the same id is set aside
    whole, so none of its checkpoints or markers is ever read (issue 20 B11).
    With a spool the control folder is made there (umask 007: group rwx, the
    setgid cluster folder gives it the controller's group) and must be ours;
    else the job directory serves."""
    base, key = shlex.quote(setup.base), shlex.quote(setup.key)
    lines = [
        "__ts_dirs_done=0",
        "__ts_dirs() {  # this incarnation's folders (teiresias/jobfiles.py); once",
        '  [ "$__ts_dirs_done" = 1 ] && return 0',
        "  __ts_dirs_done=1",
        '  local c="${SLURM_CLUSTER_NAME:-}" id="${SLURM_JOB_ID:-0}" d',
    ]
    if not setup.key:  # the layout before keys: <base>/<id>, no incarnation check
        return lines + [
            f'  export TEIRESIAS_JOB_DIR={base}"/$id"',
            '  export TEIRESIAS_CONTROL_DIR="$TEIRESIAS_JOB_DIR" TEIRESIAS_CONTROL_IN="$TEIRESIAS_JOB_DIR"',
            "}",
        ]
    lines += [
        f"  export TEIRESIAS_JOB_KEY={key}",
        f'  export TEIRESIAS_JOB_DIR={base}"${{c:+/$c}}/$id"',
        '  d="$TEIRESIAS_JOB_DIR"',
        '  if [ -e "$d" ] && [ "$(cat "$d/key" 2>/dev/null)" != "$TEIRESIAS_JOB_KEY" ]; then',
        "    # an earlier job with this id (a reset cluster): its checkpoints and markers are not ours",
        '    mv "$d" "$d.stale.$(date +%s).$$" 2>/dev/null &&',
        '      echo "teiresias: $d held an earlier job with this id; set aside as $d.stale.*" >&2',
        "  fi",
        '  (umask 077 && mkdir -p "$d" && { [ -f "$d/key" ] || printf \'%s\\n\' "$TEIRESIAS_JOB_KEY" > "$d/key"; }) 2>/dev/null',
    ]
    if not setup.spool:
        return lines + [
            '  export TEIRESIAS_CONTROL_DIR="$d" TEIRESIAS_CONTROL_IN="$d"',
            "}",
        ]
    spool = shlex.quote(setup.spool)
    sub = f'"$TEIRESIAS_CONTROL_DIR/{PROFILE_SUBDIR}"' if setup.profile else ""
    return lines + [
        f'  export TEIRESIAS_CONTROL_DIR={spool}"/$c/$id.$TEIRESIAS_JOB_KEY"',
        '  export TEIRESIAS_CONTROL_IN="$TEIRESIAS_CONTROL_DIR.in"',
        f'  [ -n "$c" ] && (umask 007 && mkdir "$TEIRESIAS_CONTROL_DIR" {sub}) 2>/dev/null',
        '  if [ -z "$c" ] || [ -L "$TEIRESIAS_CONTROL_DIR" ] || [ ! -d "$TEIRESIAS_CONTROL_DIR" ] || [ ! -O "$TEIRESIAS_CONTROL_DIR" ]; then',
        '    echo "teiresias: warning: control folder $TEIRESIAS_CONTROL_DIR unusable (missing spool on $(hostname),'
        " or not made by this job); the controller will not see this job's checkpoint answers\" >&2",
        '    export TEIRESIAS_CONTROL_DIR="$d" TEIRESIAS_CONTROL_IN="$d"',
        "  fi",
        "}",
    ]


def signal_lines(setup: JobSetup) -> list[str]:
    """The USR1/USR2 traps, first thing in the script: a signal that comes
    before the child (or its hooks) is ready must neither kill this shell nor
    be lost. With the hooks armed, USR1 is recorded for them and, when no
    process of this run has started training yet, acknowledged at once with
    "nothing new to save" (teiresias/jobfiles.py, module docstring), in the
    control folder (``dir_lines``)."""
    lines = [
        "__ts_forward() {  # signal every descendant of this shell (not the shell: its trap would loop)",
        "  local kids",
        "  kids=$(ps -e -o pid= -o ppid= | awk -v top=$$ '{ up[$1] = $2 } END {",
        "    for (p in up) { q = p; while ((q in up) && q != top && q > 1) q = up[q]; if (q == top && p != top) print p } }')",
        '  [ -n "$kids" ] && kill -s "$1" $kids 2>/dev/null',
        "  return 0",
        "}",
        *dir_lines(setup),
    ]
    if setup.hook_site is None:
        return lines + ["trap '__ts_forward USR1' USR1", "trap '__ts_forward USR2' USR2"]
    return lines + [
        "__ts_preempt() {  # record the request, pass it on, ack it if no process of this run has started",
        "  __ts_dirs",
        '  local dir="$TEIRESIAS_CONTROL_DIR" rc="${SLURM_RESTART_COUNT:-0}" f step=0 started=0 ok=0',
        '  : 2>/dev/null > "$dir/preempt-requested.$rc" && ok=1',
        "  __ts_forward USR1",
        '  [ "$ok" = 1 ] || return 0',
        '  for f in "$dir/started.$rc".*; do [ -e "$f" ] && started=1; done',
        '  [ "$started" = 0 ] || return 0',
        '  for f in "$TEIRESIAS_JOB_DIR"/checkpoints/ckpt-*-step*.pt; do [ -e "$f" ] && step=${f##*-step} && step=${step%.pt}; done',
        "  case $step in ''|*[!0-9]*) step=0 ;; esac",
        '  printf \'{"job_id": %s, "restart_count": %s, "step": %s, "path": "", "bytes": 0, '
        '"seconds": 0.0, "time": %s, "saved": false, "key": "%s"}\\n\' \\',
        '    "${SLURM_JOB_ID:-0}" "$rc" "$step" "$(date +%s.%N)" "${TEIRESIAS_JOB_KEY:-}" > "$dir/.ack.json.$$.tmp" 2>/dev/null &&',
        '    chmod 644 "$dir/.ack.json.$$.tmp" && mv -f "$dir/.ack.json.$$.tmp" "$dir/ack.json"',
        "  return 0",
        "}",
        "trap '__ts_preempt' USR1",
        "trap '__ts_forward USR2' USR2",
    ]


def render(script: str, setup: JobSetup) -> str:
    """The generated batch script for ``script`` (the user's text)."""
    if not script.startswith("#!"):
        raise NotABatchScript("the first line must start with #!")
    if "\0" in script:
        raise NotABatchScript("the script contains NUL bytes")
    body = script if script.endswith("\n") else script + "\n"
    delim = "TEIRESIAS_SCRIPT_" + hashlib.sha256(body.encode()).hexdigest()[:16].upper()
    lines = ["#!/bin/bash", *header_lines(script)]
    lines += [
        "# --- generated by tsbatch (teiresias): the submitted script, unchanged, runs",
        "# --- below as a child; this shell survives and forwards the teiresias signals.",
        *signal_lines(setup),
        "__ts_dirs",
        f"export TEIRESIAS_CHECKPOINT={0 if setup.hook_site is None else 1}",
        f"export TEIRESIAS_JOB_BASE={shlex.quote(setup.base)}",
        f"export TEIRESIAS_CHECKPOINT_EVERY={setup.every}",
        f"export TEIRESIAS_PROFILE={1 if setup.profile else 0}",
        f"export TEIRESIAS_TIMELIMIT_GRACE={setup.grace}",
        *([f"export TEIRESIAS_ELASTIC={setup.elastic}"] if setup.elastic else []),
    ]
    if setup.hook_site is not None:
        lines.append(f'export PYTHONPATH={shlex.quote(setup.hook_site)}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    if setup.profile:
        lines += profiling_lines(setup)
    lines += [
        "# A helper killed by a job signal (scancel --full reaches this shell's process group,",
        "# and a trapped signal is not ignored in children) is run again, whole.",
        '__ts_retry() { local i; for i in 1 2 3 4 5 6 7 8; do "$@" && return 0; [ $? -gt 128 ] || return 1; done; return 1; }',
        '__ts_mktemp() { __ts_script=$(mktemp "${TMPDIR:-/tmp}/tsbatch-${SLURM_JOB_ID:-0}.XXXXXX"); }',
        "__ts_retry __ts_mktemp || exit 1",
        "trap 'rm -f \"$__ts_script\"' EXIT",
        "__ts_write() {  # the here-document is read anew at each call",
        f"  cat > \"$__ts_script\" <<'{delim}'",
        body + delim,
        "}",
        "__ts_retry __ts_write || exit 1",
        '__ts_retry chmod 700 "$__ts_script" || exit 1',
        "trap '__ts_forward TERM' TERM  # scancel --signal=TERM --full does not reach the child's own session",
        '( trap \'\' USR1 USR2; exec setsid "$__ts_script" "$@" ) &',
        "__ts_child=$!",
        "while :; do",
        '  wait "$__ts_child"; __ts_rc=$?',
        '  kill -0 "$__ts_child" 2>/dev/null || break  # else a trapped signal interrupted wait',
        "done",
        "# The child ended: if a trap interrupted the last wait just before (its status 128+signal),",
        "# bash still holds the child's own status for another wait (an older bash says 127: none).",
        'wait "$__ts_child" 2>/dev/null; __ts_last=$?',
        '[ "$__ts_last" = 127 ] || __ts_rc=$__ts_last',
        "# what is left of the child's process group (e.g. a python still saving)",
        "while ps -e -o pgid= -o stat= | awk -v g=\"$__ts_child\" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; do",
        "  sleep 0.2",
        "done",
        'exit "$__ts_rc"',
    ]
    return "\n".join(lines) + "\n"
