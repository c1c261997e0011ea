"""The soak's driver: plays a Workload (tests/soak/workload.py) on a real local
cluster with the real controller, and leaves everything the checker reads in
one run folder.

- Jobs are submitted with the real sbatch (tsbatch for PyTorch jobs) by
  unprivileged users (``soak_*``, made with useradd if missing, 0700 homes),
  through ``runuser``; holds and releases by the owner or by root (an admin);
  cancels and ``scontrol update gres=gpu:0`` by the owner; ``scontrol
  requeue`` by root.
- The controller is ``teiresias controller run --json`` as a subprocess
  (tests/slurm/controller_support.py ``ControllerProc``): its rounds (one JSON
  line each) go to ``rounds.jsonl``, its log to ``controller.log``.
- Faults are real: the controller is killed with SIGKILL and started again;
  slurmctld is stopped by pid and started again (``LocalCluster.up``); a node is
  drained and resumed with scontrol; a rival controller with its own state DB
  runs on the same cluster for a while.
- After the last action the driver waits for every job to end or to wait for
  good (held by a person, a dependency that can never be met, a GPU type no
  node has), cancels what is left, lets the controller see the ends, and waits
  until sacct has every run.

Files of a run folder: ``params.json`` (the workload's arguments: the seed
regenerates it), ``driver.jsonl`` (every action: when, by whom, the command,
its answer), ``controller/`` (state DB, audit log, rounds, log), ``rival/``,
``sacct.txt`` (``sacct -D`` of the run's jobs, epoch times), ``users/``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from slurm_plugin.localcluster import ClusterConfig, LocalCluster, procs
from tests.conftest import REPO
from tests.slurm.controller_support import TEIRESIAS, ControllerProc
from tests.soak.workload import Action, JobSpec, Workload
from wrappers.protocol import format_comment

# The venv's interpreter lives under /root (0700): users run the system Python 3.11
# on the same source tree and the venv's installed packages (as tests/slurm/test_controller_ops_live.py).
SITE = REPO / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
USER_PYTHON = "/usr/bin/python3"
# sacct fields, in this order; SubmitLine last (it may hold anything but a newline)
SACCT_FIELDS = "JobID,JobIDRaw,User,State,Submit,Start,End,ElapsedRaw,NodeList,AllocTRES,ExitCode,SubmitLine"


@dataclass(frozen=True)
class SoakConfig:
    """The controller's settings for the soak, and the driver's patience."""

    poll_interval: float = 2.0
    grace_s: float = 10.0
    start_timeout_s: float = 20.0
    queues: tuple[float, ...] = (20.0,)  # GPU-seconds: jobs are demoted (and preempted) early
    drain_s: float = 60.0  # after the last action: stop waiting when no job started or ended for this long
    drain_cap_s: float = 300.0  # ... and this long at most


def soak_cluster_config(directory: Path, port_base: int) -> ClusterConfig:
    """The soak's cluster: 4 nodes x 4 GPUs, one managed partition, etc/job_submit.lua,
    accounting (sacct) on: ports PORT_BASE .. PORT_BASE+6."""
    return ClusterConfig(
        dir=directory,
        nodes=4,
        gpus_per_node=4,
        port_base=port_base,
        partitions=("gpu",),
        accounting=True,
        job_submit_lua=REPO / "etc" / "job_submit.lua",
    )


def ensure_users(users: tuple[str, ...]) -> None:
    """The soak's users, made once (idempotent): home folders 0700, like a site's."""
    for u in users:
        if subprocess.run(["id", u], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "-m", "-K", "HOME_MODE=0700", "-s", "/bin/sh", u], check=True)


def base_id(slurm_id: str) -> str:
    """``6_[2-4%2]``, ``6_2``, ``4+0`` -> ``6``, ``6``, ``4``."""
    for sep in ("_", "+"):
        slurm_id = slurm_id.split(sep, 1)[0]
    return slurm_id


class SoakController(ControllerProc):
    """ControllerProc with each round's JSON line kept apart (``rounds.jsonl``):
    the checker counts rounds from them."""

    def start(self, *args: str) -> SoakController:
        self.proc = subprocess.Popen(
            [*TEIRESIAS, "controller", "run", "-c", str(self.config), "--json", *args],
            stdout=open(self.tmp / "rounds.jsonl", "ab"),
            stderr=open(self.log, "ab"),
            env={**self.cluster.env, "PYTHONUNBUFFERED": "1"},
            cwd=REPO,
        )
        return self


class Driver:
    """Plays one Workload on ``cluster`` into ``run_dir`` (:meth:`run`): users and
    folders, the controller, every action at its offset (late ones shift what
    follows, so faults and holds keep their lengths; users' actions wait while
    slurmctld is down, as a user would retry), the drain, the end."""

    def __init__(
        self,
        workload: Workload,
        cluster: LocalCluster,
        run_dir: Path,
        cfg: SoakConfig = SoakConfig(),
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.w = workload
        self.cluster = cluster
        self.dir = run_dir
        self.cfg = cfg
        self.say = say
        self.env = cluster.env
        self.ids: dict[str, str] = {}  # key -> Slurm job id sbatch printed
        self.holds: dict[str, bool] = {}  # key -> held by a person now
        self.ctld_down = False
        self._final: dict[str, str] = {}  # job -> its final Slurm state, once seen
        self._log = None
        handle = SimpleNamespace(conf=cluster.cfg.conf, env=cluster.env)
        overrides: dict[str, Any] = {
            "policy": {"name": "las", "queues": list(cfg.queues)},
            "poll_interval": cfg.poll_interval,
            "preemption": {"grace_seconds": cfg.grace_s, "start_timeout_seconds": cfg.start_timeout_s},
        }
        for sub in ("controller", "rival"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
        self.ctl = SoakController(run_dir / "controller", handle, **overrides)
        self.rival = SoakController(run_dir / "rival", handle, **overrides)

    # ------------------------------------------------------------ logging
    def log(self, what: str, **fields: Any) -> dict[str, Any]:
        entry = {"t": round(time.time(), 3), "what": what, **fields}
        assert self._log is not None
        self._log.write(json.dumps(entry) + "\n")
        self._log.flush()
        return entry

    # ------------------------------------------------------------ running commands
    def _user_env(self, user: str) -> dict[str, str]:
        home = f"/home/{user}" if user != "root" else "/root"
        mine = self.dir / "users" / user
        return {
            "PATH": "/usr/bin:/bin",
            "SLURM_CONF": str(self.cluster.cfg.conf),
            "HOME": home,
            "LANG": "C.UTF-8",
            "SOAK_JOBBASE": str(mine / "jobs"),
            "SOAK_OUT": str(mine / "out"),
            "SOAK_REPO": str(REPO),
            "PYTHONPATH": f"{REPO}:{SITE}",
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def as_user(self, user: str, cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``cmd`` run by ``user`` (root: the admin) with a clean environment."""
        full = cmd if user == "root" else ["runuser", "-u", user, "--", "env", "-i"]
        if user != "root":
            full = [*full, *(f"{k}={v}" for k, v in self._user_env(user).items()), *cmd]
        env = self.env if user == "root" else None
        try:
            return subprocess.run(
                full, input=stdin, capture_output=True, text=True, timeout=60, env=env, cwd="/", check=False
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(full, 124, "", "timed out after 60 s")

    def _prepare_users(self) -> None:
        users = sorted({j.user for j in self.w.jobs.values()})
        ensure_users(tuple(users))
        os.chmod(self.dir, 0o755)
        (self.dir / "users").mkdir(exist_ok=True)
        os.chmod(self.dir / "users", 0o755)
        for u in users:
            for sub in ("", "jobs", "out"):
                p = self.dir / "users" / u / sub
                p.mkdir(exist_ok=True)
                subprocess.run(["chown", f"{u}:{u}", str(p)], check=True)
                os.chmod(p, 0o700 if sub else 0o755)

    # ------------------------------------------------------------ actions
    def submit_line(self, spec: JobSpec) -> list[str]:
        """The command that submits ``spec`` (what a failing invariant prints)."""
        out = self.dir / "users" / spec.user / "out"
        opts = list(spec.sbatch)
        for i, o in enumerate(opts):
            if o.startswith("--dependency="):
                dep = o.split(":", 1)[1].strip("{}")
                opts[i] = o.replace("{" + dep + "}", self.ids.get(dep, "0"))
        mine = [
            f"--job-name={spec.key}",
            f"--chdir={out}",
            f"--output={out}/%x-%A_%a.out" if spec.tasks else f"--output={out}/%x-%j.out",
        ]
        if spec.resumable and not spec.tsbatch:
            mine.append(f"--comment={format_comment({'dir': str(self.dir / 'users' / spec.user / 'jobs')})}")
        if spec.tsbatch:
            return [USER_PYTHON, "-m", "wrappers.tsbatch", "--no-profile", *mine, *opts]
        return ["sbatch", "--parsable", *mine, *opts]

    def do_submit(self, spec: JobSpec) -> None:
        dep = next((o for o in spec.sbatch if o.startswith("--dependency=")), None)
        if dep is not None and spec.after is not None and spec.after[1] not in self.ids:
            self.log("submit", key=spec.key, user=spec.user, ok=False, skipped="its dependency was never submitted")
            return
        cmd = self.submit_line(spec)
        r = self.as_user(spec.user, cmd, stdin=spec.script)
        text = r.stdout.strip()
        job = text.split(";")[0] if spec.tsbatch is False else text.rsplit(" ", 1)[-1]
        ok = r.returncode == 0 and job.isdigit()
        if ok:
            self.ids[spec.key] = job
            self.holds[spec.key] = spec.held
        self.log(
            "submit",
            key=spec.key,
            user=spec.user,
            job=job if ok else "",
            ok=ok,
            rc=r.returncode,
            line=shlex.join(["tsbatch", *cmd[3:]] if spec.tsbatch else cmd),
            err=r.stderr.strip()[-300:],
        )

    def do_user_action(self, a: Action) -> None:
        spec = self.w.jobs[a.key]
        job = self.ids.get(a.key)
        if job is None:
            self.log(a.what, key=a.key, by=a.by, ok=False, skipped="not submitted")
            return
        user = spec.user if a.by in ("owner", "") else "root"
        cmd = {
            "hold": ["scontrol", "hold", job],
            "release": ["scontrol", "release", job],
            "cancel": ["scancel", job],
            "ungpu": ["scontrol", "update", f"jobid={job}", "gres=gpu:0"],
            "requeue": ["scontrol", "requeue", job],
        }[a.what]
        t0 = time.time()
        r = self.as_user(user, cmd)
        # scancel says nothing and exits 0 for a job that already ended
        ok = r.returncode == 0 and not r.stderr.strip()
        if ok and a.what in ("hold", "release"):
            self.holds[a.key] = a.what == "hold"
        self.log(
            a.what,
            key=a.key,
            job=job,
            by=a.by or "owner",
            user=user,
            ok=ok,
            t0=round(t0, 3),
            err=r.stderr.strip()[-300:],
        )

    def do_action(self, a: Action) -> None:
        if a.what == "submit":
            self.do_submit(self.w.jobs[a.key])
        else:
            self.do_user_action(a)

    def do_fault(self, a: Action) -> None:
        t0 = time.time()
        detail: dict[str, Any] = {}
        if a.fault == "controller-kill9":
            if a.what == "fault":
                self.ctl.kill9()
            else:
                self.ctl.start()
        elif a.fault == "slurmctld-restart":
            if a.what == "fault":
                pid = self.cluster.ctld_pid()
                detail["stopped"] = pid is not None and procs.stop_pid(pid, "slurmctld")
                self.ctld_down = True
            else:
                self.cluster.up()
                self.ctld_down = False
        elif a.fault == "drain":
            state = "drain" if a.what == "fault" else "resume"
            extra = ["reason=soak"] if state == "drain" else []
            r = self.as_user("root", ["scontrol", "update", f"nodename={a.node}", f"state={state}", *extra])
            detail["rc"] = r.returncode
        elif a.fault == "rival-controller":
            if a.what == "fault":
                self.rival.start()
            else:
                detail["alive"] = self.rival.alive()
                detail["rc"] = self.rival.proc.poll() if self.rival.proc is not None else None
                self.rival.stop()
        self.log(a.what, fault=a.fault, node=a.node, t0=round(t0, 3), **detail)

    # ------------------------------------------------------------ the run
    def run(self) -> None:
        (self.dir / "params.json").write_text(
            json.dumps({"workload": self.w.args, "config": asdict(self.cfg)}, indent=1)
        )
        # The workload itself too: a later generator may draw other jobs from the same seed.
        (self.dir / "workload.json").write_text(json.dumps(asdict(self.w)) + "\n")
        self._log = open(self.dir / "driver.jsonl", "a")
        try:
            self._prepare_users()
            self.cluster.up()
            self.cluster.cancel_all_jobs()  # an earlier run's leftovers would share the GPUs
            self.ctl.start()
            self.log("start", seed=self.w.seed)
            t0 = time.monotonic()
            deferred: list[Action] = []  # users' actions while slurmctld is down: done when it is back
            for i, a in enumerate(self.w.actions):
                delay = t0 + a.at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -1.0:
                    # Behind (a loaded machine, a slow command): shift what follows, so that a
                    # fault, a hold or a drain keeps its length and is not squeezed to nothing.
                    t0 -= delay
                if a.what in ("fault", "fault-end"):
                    self.do_fault(a)
                    if a.fault == "slurmctld-restart" and a.what == "fault-end":
                        for d in deferred:
                            self.do_action(d)
                        deferred = []
                elif self.ctld_down:
                    deferred.append(a)
                else:
                    self.do_action(a)
                if i % 20 == 0:
                    self.say(f"soak: {a.at:6.0f}s  action {i + 1}/{len(self.w.actions)}")
            self.drain()
        finally:
            self.finish()
            self._log.close()

    # ------------------------------------------------------------ the end
    def _squeue(self) -> list[tuple[str, str, str]]:
        r = self.as_user("root", ["squeue", "-h", "-o", "%i|%T|%r"])
        return [tuple(line.split("|", 2)) for line in r.stdout.splitlines() if line.count("|") == 2]  # type: ignore[misc]

    def _state(self, job: str) -> str:
        """A job's Slurm state now (squeue keeps ended jobs MinJobAge seconds; sacct after)."""
        if job in self._final:
            return self._final[job]
        r = self.as_user("root", ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"])
        states = set(r.stdout.split())
        if not states:
            s = self.as_user("root", ["sacct", "-X", "-n", "-P", "-j", job, "-o", "State"])
            states = {x.split()[0] for x in s.stdout.split("\n") if x.strip()}
        state = states.pop() if len(states) == 1 else ("ACTIVE" if states else "UNKNOWN")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            self._final[job] = state
        return state

    def waits_for_good(self, key: str) -> str:
        """Why the job of ``key`` will never start ('' when it may)."""
        spec = self.w.jobs[key]
        if not spec.runnable:
            return "asks for a GPU type no node has"
        if self.holds.get(key):
            return "held by a person"
        if spec.after is not None:
            how, dep = spec.after
            state = self._state(self.ids.get(dep, "0"))
            if state not in ("PENDING", "RUNNING", "ACTIVE", "REQUEUED", "COMPLETING", "CONFIGURING"):
                if how == "afterok" and state != "COMPLETED":
                    return f"its afterok dependency ended {state}"
        return ""

    def drain(self) -> None:
        """Wait until every job has ended or waits for good. Ends early ("stalled") when
        no job started or ended for ``drain_s``, and at ``drain_cap_s`` at the latest
        ("cap"): the checker calls a startable job still pending after a stall lost."""
        by_base = {job: key for key, job in self.ids.items()}
        begun = time.monotonic()
        changed = begun
        last: set[tuple[str, str]] = set()
        self.log("drain")
        why = "done"
        while True:
            active = self._squeue()
            seen = {(i, s) for i, s, _ in active}
            if seen != last:  # something started, ended or was requeued
                changed, last = time.monotonic(), seen
            waiting = {by_base.get(base_id(i)) for i, s, _ in active}
            if all(k is not None and self.waits_for_good(k) for k in waiting):
                break
            if time.monotonic() - changed > self.cfg.drain_s:
                why = "stalled"
                break
            if time.monotonic() - begun > self.cfg.drain_cap_s:
                why = "cap"
                break
            time.sleep(2)
        self.log("drained", why=why)

    def finish(self) -> None:
        """Cancel what is left (saying why each waited), let the controller see every
        end, stop it, and wait until sacct has every run."""
        by_base = {job: key for key, job in self.ids.items()}
        left = sorted({base_id(i) for i, _, _ in self._squeue()})
        for job in left:
            key = by_base.get(job, "")
            why = self.waits_for_good(key) if key else "not the soak's"
            t0 = time.time()
            self.as_user("root", ["scancel", job])
            self.log("end-cancel", key=key, job=job, waits_for=why, t0=round(t0, 3))
        deadline = time.monotonic() + 60
        while self._squeue() and time.monotonic() < deadline:
            time.sleep(1)
        # The controller records each end at its next round.
        deadline = time.monotonic() + 30
        while self.ctl.alive() and time.monotonic() < deadline:
            if not any(r.active for r in self.ctl.records().values()):
                break
            time.sleep(self.cfg.poll_interval)
        self.ctl.stop()
        self.rival.stop()
        ids = ",".join(sorted(set(self.ids.values()), key=int))
        text = ""
        deadline = time.monotonic() + 90
        while ids:
            text = self.sacct(ids)
            rows = [line.split("|") for line in text.splitlines() if line]
            pending = [r for r in rows if r[3] in ("RUNNING", "PENDING", "REQUEUED") and r[6] in ("", "Unknown")]
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(2)
        (self.dir / "sacct.txt").write_text(text)
        self.log("end")

    def sacct(self, ids: str) -> str:
        env = {**self.env, "SLURM_TIME_FORMAT": "%s"}
        r = subprocess.run(
            ["sacct", "-a", "-D", "-n", "-P", "-j", ids, "-o", SACCT_FIELDS],  # batch steps too (collect.parse_sacct)
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        return r.stdout
