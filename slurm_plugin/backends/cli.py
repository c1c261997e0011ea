"""The default backend: Slurm's own commands, JSON where 22.05 has it.

``squeue --json`` / ``sinfo --json`` for reads (parsed in ``parse.py``),
``scontrol`` for hold, release, priority, node list, begin time and requeue,
``scancel`` for signals and cancel. Every call has a timeout; a timeout or
"Unable to contact slurm controller" is ``SlurmUnreachable``, "Invalid job
id" is ``JobVanished``, any other refusal ``SlurmError`` with Slurm's words.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from slurm_plugin.backends import fields
from slurm_plugin.backends.base import JobTarget, SlurmBackend, SlurmJob, SlurmNode, with_hold_mark
from slurm_plugin.backends.parse import (
    error_from_message,
    load_squeue_json,
    parse_scontrol_job,
    parse_scontrol_jobs,
    parse_sinfo_json,
    parse_squeue_json,
)
from teiresias.errors import ConfigError, JobVanished, SlurmError, SlurmUnreachable

# scancel -v reports "already completing or completed" for a job that ended:
# cancelling it again is not an error.
_CANCEL_DONE = "already completing or completed"

POLLS = ("json", "scontrol", "fields")
# The fields poll reads the few jobs it cannot complete one ``scontrol show job`` each,
# up to this many; more (the first poll, a burst of starts) take one read of every job.
DETAIL_SINGLE_MAX = 4
# Every this many seconds the fields poll reads every job's detail again: the safety
# net under what it keeps (an array's throttle changed after its last task split off).
DETAIL_REFRESH_S = 300.0


class CliBackend(SlurmBackend):
    """Runs Slurm commands with ``env`` (default: this process's environment;
    pass ``slurm_conf`` to aim at one cluster)."""

    name = "cli"

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        slurm_conf: str | os.PathLike[str] | None = None,
        timeout: float = 30.0,
        poll: str = "json",
    ):
        """``poll``: how ``jobs()`` reads the queue. ``json`` (default):
        ``squeue --json``. ``scontrol``: ``scontrol -d show job -o``, the same
        fields ~2x faster with 1,000 jobs (squeue spends its time building
        JSON; docs/benchmarks.md). ``fields``: ``squeue -O`` with the fields the
        controller reads (backends/fields.py), ~10x faster than ``json``, the
        same SlurmJobs."""
        if poll not in POLLS:
            raise ConfigError(f"unknown poll mode {poll!r}: choose one of {', '.join(POLLS)}")
        self.env = dict(os.environ if env is None else env)
        if slurm_conf is not None:
            self.env["SLURM_CONF"] = str(slurm_conf)
        self.timeout = timeout
        self.poll = poll
        # The fields poll's memory between polls, and when it last read every job's detail.
        self._cache = fields.PollCache.empty()
        self._details_read: float | None = None

    # ---------------------------------------------------------------- plumbing
    def run(
        self,
        *cmd: str,
        job_id: JobTarget | None = None,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Run one Slurm command; stdout on success, the mapped error otherwise.
        ``env``: variables set for this command beside the backend's."""
        try:
            r = subprocess.run(
                list(cmd),
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env={**self.env, **env} if env else self.env,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(
                f"{cmd[0]} did not answer within {self.timeout:.0f}s; slurmctld may be overloaded or down"
            ) from None
        except FileNotFoundError:
            raise SlurmError(f"{cmd[0]} not found: install slurm-client (or run `teiresias cluster up`)") from None
        if r.returncode != 0:
            raise self._classify(
                error_from_message(
                    _last_error_line(r.stderr or r.stdout) or f"{' '.join(cmd[:2])} exited {r.returncode}", job_id
                )
            )
        return r.stdout

    def _classify(self, err: SlurmError) -> SlurmError:
        """Slurm's words do not always say "unreachable" (22.05's ``squeue
        --json`` exits 0 with "Failed while looking for jobs"; ``scontrol``
        may say "Unexpected message received"): on a plain SlurmError, ask
        ``scontrol ping`` whether slurmctld is there at all."""
        if type(err) is not SlurmError or self._ping_raw():
            return err
        return SlurmUnreachable(f"slurmctld does not answer ({err}); is the cluster up and SLURM_CONF right?")

    def _ping_raw(self) -> bool:
        try:
            r = subprocess.run(
                ["scontrol", "ping"],
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=self.env,
                stdin=subprocess.DEVNULL,
            )
        except (subprocess.TimeoutExpired, FileNotFoundError):
            return False
        return r.returncode == 0 and "is UP" in r.stdout

    def _parsed(self, parse, text: str):
        try:
            return parse(text)
        except SlurmError as err:
            raise self._classify(err) from None

    def _scontrol(self, job_id: JobTarget, *args: str) -> None:
        self.run("scontrol", *args, job_id=job_id)

    def _run_together(self, *cmds: tuple[list[str], Mapping[str, str] | None]) -> list[str]:
        """Several reads at once, each a process of its own (slurmctld answers them in
        parallel), each with its whole environment (None: the backend's): their outputs
        in order, or the first failure's error as ``run`` maps it. Read one after the
        other: a process whose output outgrows its pipe waits until it is read, after
        the RPC that is the cost of the read."""
        procs: list[tuple[list[str], subprocess.Popen[str] | None, str]] = []
        for cmd, env in cmds:
            try:
                proc = subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    text=True,
                    env=dict(env) if env is not None else self.env,
                )
                procs.append((cmd, proc, ""))
            except FileNotFoundError:
                procs.append((cmd, None, f"{cmd[0]} not found: install slurm-client (or run `teiresias cluster up`)"))
        deadline = time.monotonic() + self.timeout
        outputs: list[str] = []
        failure: SlurmError | None = None
        for cmd, started, missing in procs:
            if started is None:
                failure = failure or SlurmError(missing)
                continue
            proc = started
            try:
                out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                failure = failure or SlurmUnreachable(
                    f"{cmd[0]} did not answer within {self.timeout:.0f}s; slurmctld may be overloaded or down"
                )
                continue
            if proc.returncode != 0 and failure is None:
                words = _last_error_line(err or out) or f"{' '.join(cmd[:2])} exited {proc.returncode}"
                failure = self._classify(error_from_message(words))
            outputs.append(out)
        if failure is not None:
            raise failure
        return outputs

    # ---------------------------------------------------------------- reads
    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld knows (finished ones younger than MinJobAge too)."""
        if self.poll == "fields":
            return self._fields_poll(self._run_together(*self._fields_cmds()))
        if self.poll == "scontrol":
            return parse_scontrol_jobs(self.run("scontrol", "-d", "show", "job", "-o"))
        return self._parsed(parse_squeue_json, self.run("squeue", "--json"))

    def nodes(self) -> list[SlurmNode]:
        return self._parsed(parse_sinfo_json, self.run("sinfo", "--json"))

    def jobs_and_nodes(self) -> tuple[list[SlurmJob], list[SlurmNode]]:
        """Jobs and nodes, the commands run at the same time."""
        if self.poll == "fields":
            *out, sinfo = self._run_together(*self._fields_cmds(), (["sinfo", "--json"], None))
            return self._fields_poll(out), self._parsed(parse_sinfo_json, sinfo)
        if self.poll == "scontrol":
            jobs, sinfo = self._run_together(
                (["scontrol", "-d", "show", "job", "-o"], None), (["sinfo", "--json"], None)
            )
            return parse_scontrol_jobs(jobs), self._parsed(parse_sinfo_json, sinfo)
        squeue, sinfo = self._run_together((["squeue", "--json"], None), (["sinfo", "--json"], None))
        return self._parsed(parse_squeue_json, squeue), self._parsed(parse_sinfo_json, sinfo)

    def _fields_cmds(self) -> list[tuple[list[str], Mapping[str, str] | None]]:
        env = fields.poll_env(self.env)
        return [(fields.squeue_args(), env), (fields.excluded_args(), env)]

    def _fields_poll(self, out: list[str]) -> list[SlurmJob]:
        """The fields poll from its two squeue outputs: the jobs it cannot complete from
        what it keeps are read with scontrol (backends/fields.py says which and why)."""
        records, unsplit = fields.split_records(out[0])
        excluded = fields.parse_excluded(out[1])
        need = fields.needs_detail(records, excluded, self._cache)
        now = time.monotonic()
        details: dict[int, fields.Detail] = {}
        if self._details_read is None or now - self._details_read > DETAIL_REFRESH_S or len(need) > DETAIL_SINGLE_MAX:
            text = self.run("scontrol", "-d", "show", "job", "-o")
            details = fields.parse_details(text)
            self._details_read = now
        else:
            for r in need:
                details.update(self._detail(r.job_id))
        fields.learn(records, details, self._cache)
        described = fields.unknown_reasons(records, self._cache)
        if described:
            # A description squeue printed instead of a reason code: rare, and read once.
            payload = self._parsed(load_squeue_json, self.run("squeue", "--json"))
            fields.learn_reasons(described, payload, self._cache)
        jobs = fields.build_jobs(records, excluded, details, self._cache)
        for job_id in unsplit:
            try:
                jobs.append(self.job(job_id))
            except JobVanished:
                continue
        return jobs

    def _detail(self, job_id: int) -> dict[int, fields.Detail]:
        """One job's scontrol detail (an array's meta record prints every task: the one
        asked for is kept); nothing for a job that ended and left meanwhile."""
        try:
            text = self.run("scontrol", "-d", "show", "job", "-o", str(job_id), job_id=job_id)
        except JobVanished:
            return {}
        return {j: d for j, d in fields.parse_details(text).items() if j == job_id}

    def job(self, job_id: JobTarget) -> SlurmJob:
        """One job (``scontrol show job -o``): cheaper than ``jobs()`` for one id."""
        out = self.run("scontrol", "-d", "show", "job", "-o", str(job_id), job_id=job_id)
        return parse_scontrol_job(out.strip().splitlines()[0])

    def ping(self) -> bool:
        return self._ping_raw()

    # ---------------------------------------------------------------- actions
    def hold(self, job_id: JobTarget, admin_comment: str | None = None) -> None:
        """The controller's hold: ``priority=0`` (an admin hold, as ``scontrol hold`` by
        an operator) with the mark in the same update (SlurmBackend.hold)."""
        comment = with_hold_mark(self._admin_comment(job_id, admin_comment), True)
        self._scontrol(job_id, "update", f"jobid={job_id}", "priority=0", f"admincomment={comment}")

    def release(self, job_id: JobTarget) -> None:
        """Release a held job. Slurm recomputes its priority: a manual priority
        set before the hold is lost, so set it again after this call."""
        self._scontrol(job_id, "release", str(job_id))

    def set_hold_mark(self, job_id: JobTarget, on: bool, admin_comment: str | None = None) -> None:
        comment = with_hold_mark(self._admin_comment(job_id, admin_comment), on)
        self._scontrol(job_id, "update", f"jobid={job_id}", f"admincomment={comment}")

    def _admin_comment(self, job_id: JobTarget, known: str | None) -> str:
        """The job's AdminComment: ``known`` when the caller has just read it, else read now
        (an update replaces the whole comment: what is in it must be written back)."""
        return self.job(job_id).admin_comment if known is None else known

    def set_priority(self, job_id: JobTarget, priority: int) -> None:
        self._scontrol(job_id, "update", f"jobid={job_id}", f"priority={int(priority)}")

    def set_nodelist(self, job_id: JobTarget, nodes: tuple[str, ...]) -> None:
        """Pin a pending job to exactly ``nodes``. NumNodes is set with it:
        Slurm widens a 1-node job given a 2-node list and does not narrow it
        back when the list is cleared. An empty tuple clears the pin."""
        if not nodes:
            self._scontrol(job_id, "update", f"jobid={job_id}", "nodelist=")
            return
        n = len(nodes)
        self._scontrol(job_id, "update", f"jobid={job_id}", f"nodelist={','.join(nodes)}", f"numnodes={n}-{n}")

    def signal(self, job_id: JobTarget, signal: str, scope: str = "full") -> None:
        """``scancel --signal=SIG --full``: the batch shell and all its children;
        ``--batch``: the batch shell only; no flag: the job steps only."""
        sig = signal.upper().removeprefix("SIG")
        flags = {"full": ("--full",), "batch": ("--batch",), "steps": ()}[scope]
        self._scancel(job_id, f"--signal={sig}", *flags)

    def batch_script(self, job_id: JobTarget) -> str:
        """``scontrol write batch_script J -`` (Slurm shows a job's --signal nowhere else in 22.05)."""
        return self.run("scontrol", "write", "batch_script", str(job_id), "-", job_id=int(str(job_id).split("_")[0]))

    def suspend(self, job_id: JobTarget) -> None:
        self._scontrol(job_id, "suspend", str(job_id))

    def resume(self, job_id: JobTarget) -> None:
        self._scontrol(job_id, "resume", str(job_id))

    def set_gres(self, job_id: JobTarget, gres: str) -> None:
        self._scontrol(job_id, "update", f"jobid={job_id}", f"gres={gres}")

    def requeue(self, job_id: JobTarget, hold: bool = True) -> None:
        """Requeue a running job (PENDING again, restart count +1, a ~120 s
        BeginTime: see ``clear_begin_time``); ``hold`` also holds it."""
        if hold:
            self.set_hold_mark(job_id, True)
        self._scontrol(job_id, "requeuehold" if hold else "requeue", str(job_id))

    def clear_begin_time(self, job_id: JobTarget) -> None:
        self._scontrol(job_id, "update", f"jobid={job_id}", "starttime=now")

    def cancel(self, job_id: JobTarget) -> None:
        """Cancel; a job that already ended is fine (nothing to do)."""
        self._scancel(job_id)

    def _scancel(self, job_id: JobTarget, *flags: str) -> None:
        # scancel exits 0 for an unknown job unless -v makes it say so on stderr
        try:
            r = subprocess.run(
                ["scancel", "-v", *flags, str(job_id)],
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=self.env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"scancel did not answer within {self.timeout:.0f}s") from None
        errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
        if r.returncode != 0 or errors:
            line = errors[-1] if errors else _last_error_line(r.stderr) or f"scancel exited {r.returncode}"
            if _CANCEL_DONE in line and not any(f.startswith("--signal") for f in flags):
                return
            raise self._classify(error_from_message(line.split("error:", 1)[-1].strip(), job_id))

    # ---------------------------------------------------------------- extras (tests, demo)
    def submit(self, script: str | Path, *sbatch_args: str) -> int:
        """``sbatch --parsable``: a script path, or script text (starting with
        ``#!``) passed on stdin. Returns the job id."""
        text = str(script)
        if text.startswith("#!"):
            out = self.run("sbatch", "--parsable", *sbatch_args, input=text)
        else:
            out = self.run("sbatch", "--parsable", *sbatch_args, text)
        return int(out.strip().split(";")[0])


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    # scontrol prints "<message> for job N" then "slurm_xxx error: <message>"
    for ln in lines:
        if "for job" in ln or "error" in ln.lower():
            return ln
    return lines[-1] if lines else ""
