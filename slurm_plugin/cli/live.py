"""What `teiresias queue` and `explain` ask Slurm, started before they read the state DB.

Everything else they show, the controller already keeps (its state DB); from Slurm
they need only each job's live state and nodes, and which jobs the caller may see.
One ``squeue`` with four fields gives both (``LIVE_FORMAT``): run as the caller, it lists exactly what squeue shows them under the site's PrivateData,
which is the privacy rule (``visible``). With 1,000 jobs it takes ~30 ms where
``squeue --json`` took 0.4-0.6 s, and it runs while the command reads the DB.
A caller other than root also needs PrivateData itself (``scontrol show config``),
read at the same time.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import click

from slurm_plugin.backends.parse import error_from_message, expand_hostlist
from slurm_plugin.controller.startup import SlurmSite, parse_show_config
from slurm_plugin.controller.state import JobRecord

TIMEOUT_S = 30.0
# Each job's id, state (squeue's %T is openapi's job_state) and nodes: those it runs on,
# else those it was pinned to (SlurmJob.nodes). Field and record ends as in the
# controller's poll (backends/fields.py).
SEP, END = "\x1f", "\x1e"
LIVE_FORMAT = f"%A{SEP}%T{SEP}%N{SEP}%n{END}"


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A job as squeue shows it to the caller now: what `queue` adds to the state DB."""

    job_id: int
    state: str
    nodes: tuple[str, ...]


def live_args() -> list[str]:
    """Every job the caller may see, in every state, one line per job record (as the poll)."""
    return ["squeue", "--noheader", "--all", "--states=all", "--array-unique", f"--format={LIVE_FORMAT}"]


def parse_live(text: str) -> dict[int, LiveJob]:
    out: dict[int, LiveJob] = {}
    for chunk in text.split(END):
        values = chunk.lstrip("\n").split(SEP)
        if len(values) != 4 or not values[0].isdigit():
            continue
        job, state, ran, req = values
        out[int(job)] = LiveJob(int(job), state.upper(), expand_hostlist(ran) or expand_hostlist(req))
    return out


class _Command:
    """One Slurm command running in the background; ``result`` waits for it."""

    def __init__(self, argv: list[str], env: Mapping[str, str]) -> None:
        self.argv = argv
        try:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env=dict(env),
            )
            self.error = ""
        except OSError as exc:
            self.proc, self.error = None, f"{argv[0]}: {exc.strerror or exc}"

    def result(self) -> tuple[str | None, str]:
        """(stdout, "") on success, (None, why) otherwise."""
        if self.proc is None:
            return None, self.error
        try:
            out, err = self.proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return None, f"{self.argv[0]} did not answer within {TIMEOUT_S:.0f}s"
        if self.proc.returncode != 0:
            lines = [ln.strip() for ln in (err or out).splitlines() if ln.strip()]
            words = lines[-1] if lines else f"{self.argv[0]} exited {self.proc.returncode}"
            return None, str(error_from_message(words))
        return out, ""


class LiveRead:
    """The command's question to Slurm, asked at construction, answered by ``jobs`` and ``visible``."""

    def __init__(self, env: Mapping[str, str], ask_slurm: bool = True) -> None:
        self.me = pwd.getpwuid(os.geteuid()).pw_name
        self.root = os.geteuid() == 0
        self._squeue = _Command(live_args(), env) if ask_slurm else None
        # root sees every job whatever PrivateData says: no need to read it.
        self._config = None if self.root else _Command(["scontrol", "show", "config"], env)
        self._jobs: dict[int, LiveJob] | None = None
        self._asked = False

    def jobs(self, prog: str, fallback: str) -> dict[int, LiveJob] | None:
        """The jobs squeue shows the caller now by id; None, said in one line on stderr
        with what ``prog`` does instead (``fallback``), when Slurm did not answer."""
        if self._squeue is None or self._asked:
            return self._jobs
        self._asked = True
        out, why = self._squeue.result()
        if out is None:
            click.echo(f"{prog}: Slurm did not answer ({why}); {fallback}", err=True)
            return None
        self._jobs = parse_live(out)
        return self._jobs

    def site(self) -> tuple[SlurmSite | None, str]:
        if self._config is None:
            return None, ""
        out, why = self._config.result()
        if out is None or "ClusterName" not in out:
            return None, why or "no ClusterName in scontrol show config"
        return parse_show_config(out), ""

    def visible(self, prog: str) -> Callable[[JobRecord], bool]:
        """What ``squeue`` would show the caller under the site's PrivateData: with
        ``jobs`` in it, a user sees their own jobs and those slurmctld still lists
        for them (it hides the others' from squeue too, and shows all of them to
        operators and admins); without it, every job. root sees all."""
        if self.root:
            return lambda r: True
        site, why = self.site()
        me = self.me
        if site is None:
            click.echo(f"{prog}: cannot read Slurm's PrivateData ({why}); showing your own jobs only", err=True)
            return lambda r: r.user == me
        if me == site.slurm_user or not site.private_jobs:
            return lambda r: True
        listed = set(self._jobs or ())  # None: Slurm not asked (--no-slurm) or down: own jobs only
        return lambda r: r.user == me or r.job_id in listed
