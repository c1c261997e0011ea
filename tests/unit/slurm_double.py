"""An in-memory Slurm for fast unit tests of the controller's round, enactment and recovery.

A TEST DOUBLE, beside (never instead of) the real-Slurm tests in tests/slurm/:
it implements the backend interface (slurm_plugin/backends/base.py) with the
effects of the scontrol calls that the controller relies on, as measured on
Slurm 22.05 and written down in /work/shared/notes/slurm-on-one-machine.md
(a hold sets priority 0; a requeue with hold leaves the job PENDING, held,
restart count + 1, a new SubmitTime and a BeginTime ~120 s ahead; a held or
running job refuses what Slurm refuses). What no real Slurm lets a test
cause on demand is the reason it exists: the controller dying in the middle
of an action (``crash_on``), so that the journal's recovery branches can be
driven one by one. Slurm's own scheduling is a call the test makes
(``schedule``), so each test says when Slurm starts what it released.
"""

from __future__ import annotations

from dataclasses import replace

from slurm_plugin.backends.base import HOLD_MARK, SlurmBackend, SlurmJob, SlurmNode, with_hold_mark
from teiresias.errors import JobVanished, SlurmError

# Slurm's delay of a requeued job's next start (BeginTime), in seconds.
REQUEUE_BEGIN_DELAY_S = 120.0


class Crash(BaseException):
    """The controller process dies here: nothing in the controller catches a
    BaseException that is not an Exception, so the round stops where it is,
    journal rows pending, as a kill -9 would leave them."""


class InMemorySlurm(SlurmBackend):
    name = "in-memory"

    def __init__(self, nodes: dict[str, int], partition: str = "gpu") -> None:
        self.partition = partition
        self._nodes = dict(nodes)  # node -> GPUs
        self._down: set[str] = set()
        self._jobs: dict[int, SlurmJob] = {}
        self.scripts: dict[int, str] = {}
        self.calls: list[tuple[str, str]] = []  # (method, job) of every action asked for
        self.signals: list[tuple[int, str, str]] = []  # (job, signal, scope) delivered
        self._crash: tuple[str, bool] | None = None
        self.clock = 0.0  # what Slurm's clock says: SubmitTime of a requeue, StartTime of a start

    # ------------------------------------------------------------ test side
    def submit(
        self,
        job_id: int,
        gpus: int,
        *,
        now: float,
        held: bool = True,
        comment: str = "",
        requeue: bool = True,
        script: str = "#!/bin/sh\nsleep 60\n",
        name: str = "j",
    ) -> SlurmJob:
        """sbatch through etc/job_submit.lua (``held``: priority 0 and the project's hold mark)."""
        sj = SlurmJob(
            job_id=job_id,
            name=name,
            user="u",
            account="a",
            partition=self.partition,
            state="PENDING",
            state_reason="JobHeldUser" if held else "Priority",
            priority=0 if held else 1,
            restart_count=0,
            requeue=requeue,
            held=held,
            gpus=gpus,
            num_nodes=1,
            nodes=(),
            required_nodes=(),
            submit_time=now,
            eligible_time=None,
            start_time=None,
            end_time=None,
            time_limit_minutes=None,
            command="x",
            comment=comment,
            admin_comment=HOLD_MARK if held else "",
        )
        self._jobs[job_id] = sj
        self.scripts[job_id] = script
        return sj

    def crash_on(self, method: str, *, after: bool = False) -> None:
        """The next call of ``method`` kills the controller: before Slurm acts on it,
        or with ``after`` once Slurm has done it (the answer never came back)."""
        self._crash = (method, after)

    def schedule(self, now: float) -> list[int]:
        """Slurm's scheduler: each released, eligible pending job whose node list has
        the GPUs free starts there (the controller pins every job it releases)."""
        self.clock = now
        started = []
        for j, sj in sorted(self._jobs.items()):
            if sj.state != "PENDING" or sj.held or sj.priority == 0 or not sj.required_nodes:
                continue
            if sj.state_reason in ("BadConstraints",):
                continue
            if sj.eligible_time and sj.eligible_time > now:
                continue
            per = -(-sj.gpus // len(sj.required_nodes))
            if any(self._free(n) < per or n in self._down for n in sj.required_nodes):
                continue
            self._jobs[j] = replace(
                sj, state="RUNNING", state_reason="None", nodes=sj.required_nodes, start_time=now, end_time=None
            )
            started.append(j)
        return started

    def refuse(self, job_id: int, reason: str = "BadConstraints") -> None:
        """Slurm will not start a released job where it is pinned (a constraint the
        controller does not model): it stays pending with that reason."""
        self._jobs[job_id] = replace(self._jobs[job_id], state_reason=reason)

    def down(self, node: str) -> None:
        self._down.add(node)

    def finish(self, job_id: int, now: float, state: str = "COMPLETED") -> None:
        self._jobs[job_id] = replace(self._jobs[job_id], state=state, end_time=now)

    def job_now(self, job_id: int) -> SlurmJob:
        return self._jobs[job_id]

    # --------------------------------------------------------- the backend
    def _free(self, node: str) -> int:
        used = 0
        for sj in self._jobs.values():
            if sj.state == "RUNNING" and node in sj.nodes:
                used += -(-sj.gpus // len(sj.nodes))
        return self._nodes[node] - used

    def _act(self, method: str, job_id: int | str) -> SlurmJob:
        self.calls.append((method, str(job_id)))
        crash = self._crash
        if crash is not None and crash[0] == method and not crash[1]:
            self._crash = None
            raise Crash(f"controller killed before {method} {job_id}")
        try:
            return self._jobs[int(job_id)]
        except (KeyError, ValueError):
            raise JobVanished(f"Invalid job id specified: {job_id}") from None

    def _done(self, method: str) -> None:
        crash = self._crash
        if crash is not None and crash[0] == method and crash[1]:
            self._crash = None
            raise Crash(f"controller killed after {method}")

    def jobs(self) -> list[SlurmJob]:
        return [
            sj
            for sj in self._jobs.values()
            if sj.state not in ("COMPLETED", "CANCELLED", "FAILED") or (sj.end_time or 0) >= self.clock - 300
        ]

    def job(self, job_id: int | str) -> SlurmJob:
        return self._act("job", job_id)

    def nodes(self) -> list[SlurmNode]:
        return [
            SlurmNode(
                n,
                frozenset({"DOWN"} if n in self._down else {"IDLE" if self._free(n) == g else "MIXED"}),
                g,
                g - self._free(n),
                (self.partition,),
            )
            for n, g in sorted(self._nodes.items())
        ]

    def hold(self, job_id: int, admin_comment: str | None = None) -> None:
        sj = self._act("hold", job_id)
        if sj.state != "PENDING":
            raise SlurmError(f"scontrol hold {job_id}: Job is no longer pending execution")
        # The controller's hold is marked as its own, in the same update (SlurmBackend.hold).
        self._jobs[sj.job_id] = replace(
            sj, held=True, priority=0, state_reason="JobHeldUser", admin_comment=with_hold_mark(sj.admin_comment, True)
        )
        self._done("hold")

    def release(self, job_id: int) -> None:
        sj = self._act("release", job_id)
        self._jobs[sj.job_id] = replace(sj, held=False, priority=max(sj.priority, 1), state_reason="Priority")
        self._done("release")

    def set_priority(self, job_id: int, priority: int) -> None:
        sj = self._act("set_priority", job_id)
        self._jobs[sj.job_id] = replace(sj, priority=priority)
        self._done("set_priority")

    def set_nodelist(self, job_id: int, nodes: tuple[str, ...]) -> None:
        sj = self._act("set_nodelist", job_id)
        if sj.state != "PENDING":
            raise SlurmError(f"scontrol update {job_id} ReqNodeList: Job is no longer pending execution")
        self._jobs[sj.job_id] = replace(sj, required_nodes=tuple(nodes), num_nodes=len(nodes))
        self._done("set_nodelist")

    def signal(self, job_id: int, signal: str, scope: str = "full") -> None:
        sj = self._act("signal", job_id)
        if sj.state != "RUNNING":
            raise SlurmError(f"scancel --signal {signal} {job_id}: Job is pending execution")
        self.signals.append((sj.job_id, signal, scope))
        self._done("signal")

    def batch_script(self, job_id: int | str) -> str:
        if int(job_id) not in self.scripts:
            raise JobVanished(f"Invalid job id specified: {job_id}")
        return self.scripts[int(job_id)]

    def requeue(self, job_id: int, hold: bool = True) -> None:
        sj = self._act("requeue", job_id)
        if sj.state != "RUNNING":
            raise SlurmError(f"scontrol requeue {job_id}: Job is pending execution")
        self._jobs[sj.job_id] = replace(
            sj,
            state="PENDING",
            state_reason="JobHeldUser" if hold else "BeginTime",
            held=hold,
            priority=0 if hold else sj.priority,
            restart_count=sj.restart_count + 1,
            nodes=(),
            admin_comment=with_hold_mark(sj.admin_comment, True) if hold else sj.admin_comment,
            submit_time=self.clock,
            eligible_time=self.clock + REQUEUE_BEGIN_DELAY_S,
            end_time=self.clock,
        )
        self._done("requeue")

    def clear_begin_time(self, job_id: int) -> None:
        sj = self._act("clear_begin_time", job_id)
        self._jobs[sj.job_id] = replace(sj, eligible_time=None)
        self._done("clear_begin_time")

    def cancel(self, job_id: int) -> None:
        sj = self._act("cancel", job_id)
        self._jobs[sj.job_id] = replace(sj, state="CANCELLED", end_time=self.clock)
        self._done("cancel")

    def set_hold_mark(self, job_id: int | str, on: bool, admin_comment: str | None = None) -> None:
        sj = self._act("set_hold_mark", job_id)
        self._jobs[sj.job_id] = replace(sj, admin_comment=with_hold_mark(sj.admin_comment, on))
        self._done("set_hold_mark")
