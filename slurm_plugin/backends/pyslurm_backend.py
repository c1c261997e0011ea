"""pyslurm backend: the same interface through libslurm, for sites whose
Slurm matches an installed pyslurm.

pyslurm is built against one Slurm release (PyPI has 25.11 only; building it
against 22.05 fails with "Slurm version mismatch: requires Slurm 25.11,
found 22.5"), so it is used only when ``import pyslurm`` works AND its
major.minor equals the site's Slurm; ``pyslurm_usable`` says why not
otherwise. Not exercised here (no matching pyslurm for Debian 12's 22.05):
each method is one pyslurm call, written against pyslurm 25.11's API
(``pyslurm.Job``/``Jobs``/``Nodes``/``JobSubmitDescription``).

Mapping:
  jobs()             pyslurm.Jobs.load()                      -> SlurmJob
  nodes()            pyslurm.Nodes.load()                     -> SlurmNode
  hold / release     Job(id).hold() / .release()
  set_priority       Job(id).modify(JobSubmitDescription(priority=p))
  set_nodelist       Job(id).modify(JobSubmitDescription(required_nodes=..., nodes=n))
  signal             Job(id).send_signal(sig, steps="all")    (= scancel --full)
  requeue            Job(id).requeue(hold=...)
  clear_begin_time   Job(id).modify(JobSubmitDescription(begin_time="now"))
  cancel             Job(id).cancel()
"""

from __future__ import annotations

import importlib
import re
import subprocess
from collections.abc import Mapping
from typing import Any

from slurm_plugin.backends.base import JobTarget, SlurmBackend, SlurmJob, SlurmNode, with_hold_mark
from slurm_plugin.backends.parse import FINISHED_STATES, HELD_REASONS, error_from_message, expand_hostlist, gres_count
from teiresias.errors import SlurmError


def site_slurm_version(env: Mapping[str, str] | None = None) -> str | None:
    """``scontrol --version`` -> "22.05.8" (None when it cannot say)."""
    try:
        r = subprocess.run(
            ["scontrol", "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", r.stdout)
    return m.group(0) if r.returncode == 0 and m else None


def _major_minor(version: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def pyslurm_usable(site_version: str | None) -> tuple[bool, str]:
    """(usable, reason). pyslurm's own version number is the Slurm release it was built for."""
    try:
        pyslurm = importlib.import_module("pyslurm")
    except Exception as exc:  # ImportError, or a libslurm that fails to load
        return False, (
            f"pyslurm is not used: `import pyslurm` fails ({type(exc).__name__}: {exc}); "
            "PyPI only has pyslurm for Slurm 25.11, the CLI backend works with any Slurm"
        )
    built = str(getattr(pyslurm, "__version__", "") or _call(pyslurm, "version") or "")
    if site_version is None:
        return False, "pyslurm is not used: the site's Slurm version is unknown (`scontrol --version` failed)"
    if _major_minor(built) is None or _major_minor(built) != _major_minor(site_version):
        return False, (
            f"pyslurm is not used: it was built for Slurm {built or '?'} and this site runs "
            f"Slurm {site_version}; pyslurm must match the Slurm major.minor release"
        )
    return True, f"pyslurm {built} matches Slurm {site_version}"


def _call(mod: Any, name: str) -> Any:
    fn = getattr(mod, name, None)
    try:
        return fn() if callable(fn) else None
    except Exception:
        return None


def _gpus(gres: Mapping[str, Any] | None) -> int:
    """pyslurm gres dicts: {"gpu": 4}, {"gpu:tesla": 4}, or a count with its
    indices {"gpu": "2(IDX:0,2)"}: the same rule as the other backends (gres_count)."""
    return gres_count(",".join(f"{k}:{v}" for k, v in (gres or {}).items()))


def job_from_pyslurm(j: Any) -> SlurmJob:
    """pyslurm.Job -> SlurmJob (attribute names of pyslurm 25.11)."""
    state = str(j.state or "UNKNOWN").upper()
    reason = str(j.state_reason or "None")
    priority = int(j.priority or 0)
    num_nodes = int(j.num_nodes or 1)
    per_node = _gpus(j.gres_per_node)
    ran_on = expand_hostlist(j.allocated_nodes or "")
    required = expand_hostlist(j.required_nodes or "")
    finished = state in FINISHED_STATES
    started = state in ("RUNNING", "SUSPENDED", "COMPLETING") or (finished and bool(ran_on))
    return SlurmJob(
        job_id=int(j.id),
        name=j.name or "",
        user=j.user_name or "",
        account=j.account or "",
        partition=j.partition or "",
        state=state,
        state_reason=reason,
        priority=priority,
        restart_count=int(j.requeue_count or 0),
        requeue=bool(j.is_requeueable),
        held=state == "PENDING" and (reason in HELD_REASONS or priority == 0),
        gpus=per_node * num_nodes,
        num_nodes=num_nodes,
        nodes=ran_on or required,
        required_nodes=required,
        submit_time=float(j.submit_time or 0),
        eligible_time=j.eligible_time or None,
        start_time=(j.start_time or None) if started else None,
        end_time=(j.end_time or None) if finished else None,
        time_limit_minutes=j.time_limit or None,
        command=j.command or "",
        comment=j.comment or "",
        gpus_per_node=per_node or None,
    )


def node_from_pyslurm(n: Any) -> SlurmNode:
    """pyslurm.Node -> SlurmNode; its state string is complete ("MIXED+DRAIN")."""
    return SlurmNode(
        name=n.name,
        state=frozenset(s for s in str(n.state or "UNKNOWN").upper().split("+") if s),
        gpus=_gpus(n.configured_gres),
        gpus_used=_gpus(n.allocated_gres),
        partitions=tuple(n.partitions or ()),
        cpus=int(n.total_cpus or 0),
        mem_mb=int(n.real_memory or 0),
    )


class PyslurmBackend(SlurmBackend):
    name = "pyslurm"

    def __init__(self, env: Mapping[str, str] | None = None):
        ok, why = pyslurm_usable(site_slurm_version(env))
        if not ok:
            raise SlurmError(why)
        import pyslurm

        self.pyslurm = pyslurm

    def _do(self, job_id: JobTarget | None, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except self.pyslurm.RPCError as exc:  # carries Slurm's own message
            raise error_from_message(str(exc), job_id) from None

    def _job(self, job_id: JobTarget):
        if not str(job_id).isdigit():
            raise SlurmError(
                f"job {job_id}: the pyslurm backend does not address array tasks;"
                " use backend: cli for partitions with job arrays"
            )
        return self.pyslurm.Job(int(job_id))

    def _modify(self, job_id: JobTarget, **changes) -> None:
        self._do(job_id, self._job(job_id).modify, self.pyslurm.JobSubmitDescription(**changes))

    def jobs(self) -> list[SlurmJob]:
        return [job_from_pyslurm(j) for j in self._do(None, self.pyslurm.Jobs.load).values()]

    def nodes(self) -> list[SlurmNode]:
        return [node_from_pyslurm(n) for n in self._do(None, self.pyslurm.Nodes.load).values()]

    def hold(self, job_id: JobTarget, admin_comment: str | None = None) -> None:
        # One update, mark and priority 0 (SlurmBackend.hold); pyslurm passes priority 0
        # as 0 (JobSubmitDescription: u32(priority, zero_is_noval=False)).
        self._modify(job_id, admin_comment=self._marked(job_id, admin_comment, True), priority=0)

    def set_hold_mark(self, job_id: JobTarget, on: bool, admin_comment: str | None = None) -> None:
        self._modify(job_id, admin_comment=self._marked(job_id, admin_comment, on))

    def _marked(self, job_id: JobTarget, known: str | None, on: bool) -> str:
        """The AdminComment with the mark set or taken out, the rest kept (SlurmBackend.hold)."""
        if known is None:
            known = str(getattr(self._do(job_id, self.pyslurm.Job.load, int(job_id)), "admin_comment", "") or "")
        return with_hold_mark(known, on)

    def release(self, job_id: JobTarget) -> None:
        self._do(job_id, self._job(job_id).release)

    def set_priority(self, job_id: JobTarget, priority: int) -> None:
        self._modify(job_id, priority=int(priority))

    def set_nodelist(self, job_id: JobTarget, nodes: tuple[str, ...]) -> None:
        self._modify(job_id, required_nodes=",".join(nodes), nodes=len(nodes))

    def signal(self, job_id: JobTarget, signal: str, scope: str = "full") -> None:
        sig = signal.upper() if signal.upper().startswith("SIG") else "SIG" + signal.upper()
        steps = {"full": "all", "batch": "batch", "steps": "children"}[scope]
        self._do(job_id, self._job(job_id).send_signal, sig, steps=steps)

    def requeue(self, job_id: JobTarget, hold: bool = True) -> None:
        self._do(job_id, self._job(job_id).requeue, hold=hold)

    def clear_begin_time(self, job_id: JobTarget) -> None:
        self._modify(job_id, begin_time="now")

    def cancel(self, job_id: JobTarget) -> None:
        self._do(job_id, self._job(job_id).cancel)
