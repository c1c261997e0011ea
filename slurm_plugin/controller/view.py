"""What `teiresias queue` (and the demo's live table) shows: one row per managed job.

Built from the controller's state DB; Slurm's live state is added when it
answers. Attained GPU-time is computed at ``now`` from the stored run
segments and the open run's Slurm StartTime, so it is current even between
two controller rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from slurm_plugin.controller import accounting
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import Job, JobId
from teiresias.policy.themis.apps import app_of


class LiveState(Protocol):
    """What a row reads of Slurm's live view of a job: a SlurmJob, or the few fields
    `teiresias queue` asks squeue for (cli/live.py LiveJob)."""

    @property
    def state(self) -> str: ...

    @property
    def nodes(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class QueueRow:
    job_id: int
    user: str
    name: str
    gpus: int
    state: str  # the controller's phase (PENDING, STARTING, RUNNING, PREEMPTING, FINISHED)
    slurm_state: str | None  # what Slurm says now (None when Slurm did not answer)
    queue: str  # Q1..QK
    queue_index: int
    rank: int | None
    attained_gpu_seconds: float
    executed_seconds: float
    gittins_index: float | None
    preemptions: int
    placement: list[dict[str, Any]]
    reason: str
    skew: float | None
    submit_time: float
    first_start_time: float | None
    end_time: float | None
    final_state: str | None
    ckpt_seconds: float | None
    ckpt_bytes: int | None
    # Measured use of the running job (controller/usage.py); None while it does
    # not run, and GPU figures None without NVML (usage_note says why).
    gpu_util: float | None = None
    gpu_mem_used: int | None = None
    gpu_mem_total: int | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    usage_time: float | None = None
    usage_note: str = ""
    app: str = ""  # its app (docs/themis.md), under any policy
    rho: float | None = None  # its app's finish-time fairness at the last round (themis)
    lease_ends: float | None = None  # when its GPU lease ends (themis, running jobs)
    # GPU sharing (docs/sjf-bsbf.md): the job sharing its GPUs now, its sub-batch
    # (None: its full batch) and gradient-accumulation steps.
    # Gandiva (docs/gandiva.md) uses shared_with too: its first colocated partner.
    shared_with: int | None = None
    sub_batch: int | None = None
    accumulation: int = 1
    # Gandiva: every job on the same GPUs, how often it was suspended for a partner's
    # slice, and how often it was migrated (controller/slicing.py).
    colocated_with: list[int] = field(default_factory=list)
    slices: int = 0
    migrations: int = 0
    # Work lost to its preemptions, GPU-seconds since the last checkpoint at each (issue 20 B12).
    lost_gpu_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def build_rows(
    records: Iterable[JobRecord],
    now: float,
    slurm: Mapping[int, LiveState] | None = None,
    themis: Mapping[str, Mapping[int, Any]] | None = None,
    app_for: Callable[[JobRecord], str] | None = None,
    gandiva: Mapping[int, Any] | None = None,
) -> list[QueueRow]:
    """Rows ordered like the policy ranks them: running first, then waiting jobs by rank.

    ``themis``: the last round's stored apps, rho and leases (controller/leases.py);
    ``app_for``: a record's explicit app (tsbatch --app, the config's apps), '' if none.
    ``gandiva``: the controller's Gandiva state per job (controller/slicing.py Member).
    """
    rows = []
    themis = themis or {}
    t_apps, t_rho, t_leases = themis.get("apps", {}), themis.get("rho", {}), themis.get("leases", {})
    for r in records:
        sj = slurm.get(r.job_id) if slurm is not None else None
        live = (Phase.STARTING, Phase.RUNNING, Phase.PREEMPTING)
        if r.phase in live and r.planned is not None:
            alloc = [{"node": a.node, "gpus": a.gpus} for a in r.planned.allocations]
        elif r.phase in live and sj is not None and sj.nodes:
            alloc = [{"node": n, "gpus": None} for n in sj.nodes]  # placed by Slurm, not by us
        else:
            alloc = []
        g = (gandiva or {}).get(r.job_id)
        group = list(g.group) if g is not None and r.active else []
        rows.append(
            QueueRow(
                job_id=r.job_id,
                user=r.user,
                name=r.name,
                gpus=r.gpus,
                state=r.phase.value,
                slurm_state=sj.state if sj is not None else None,
                queue=f"Q{r.queue + 1}",
                queue_index=r.queue,
                rank=r.rank,
                attained_gpu_seconds=round(accounting.attained_gpu_seconds(r, now), 1),
                executed_seconds=round(accounting.total_executed(r, now), 1),
                gittins_index=r.gittins,
                preemptions=r.preemptions,
                lost_gpu_seconds=round(r.lost_gpu_seconds, 1),
                placement=alloc,
                reason=r.reason,
                skew=r.skew,
                app=t_apps.get(r.job_id)
                or (app_for(r) if app_for else "")
                or app_of(
                    Job(JobId(r.job_id), r.gpus, r.submit_time, user=r.user, account=r.account, model_name=r.name)
                ),
                rho=t_rho.get(r.job_id) if r.active else None,
                lease_ends=t_leases.get(r.job_id) if r.phase in live else None,
                submit_time=r.submit_time,
                first_start_time=r.first_start_time,
                end_time=r.end_time,
                final_state=r.final_state,
                ckpt_seconds=r.ckpt_seconds,
                ckpt_bytes=r.ckpt_bytes,
                gpu_util=r.gpu_util,
                gpu_mem_used=r.gpu_mem_used,
                gpu_mem_total=r.gpu_mem_total,
                cpu_percent=r.cpu_percent,
                rss_bytes=r.rss_bytes,
                usage_time=r.usage_time,
                usage_note=r.usage_note,
                shared_with=r.shared_with if r.shared_with is not None or not group else group[0],
                sub_batch=r.sub_batch,
                accumulation=r.accumulation,
                colocated_with=group,
                slices=g.slices if g is not None else 0,
                migrations=g.migrations if g is not None else 0,
            )
        )
    order = {
        Phase.RUNNING.value: 0,
        Phase.PREEMPTING.value: 0,
        Phase.STARTING.value: 1,
        Phase.PENDING.value: 2,
        Phase.FINISHED.value: 3,
    }
    rows.sort(key=lambda x: (order[x.state], x.rank if x.rank is not None else 1 << 30, x.job_id))
    return rows


def _fmt_gpu_time(s: float) -> str:
    if s < 600:
        return f"{s:.0f}s"
    if s < 36000:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def _fmt_bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n}B"


def usage_cells(r: QueueRow) -> tuple[str, str]:
    """GPU_UTIL and GPU_MEM: "-" for a job that does not run or has no sample
    yet, "n/a" where the job's GPUs could not be measured (no NVML: no GPU)."""
    if r.usage_time is None:
        return "-", "-"
    util = "n/a" if r.gpu_util is None else f"{r.gpu_util:.0f}%"
    mem = (
        "n/a"
        if r.gpu_mem_used is None
        else (_fmt_bytes(r.gpu_mem_used) + (f"/{_fmt_bytes(r.gpu_mem_total)}" if r.gpu_mem_total else ""))
    )
    return util, mem


def format_table(rows: list[QueueRow]) -> str:
    """squeue-like text table."""
    head = [
        "JOBID",
        "USER",
        "NAME",
        "GPUS",
        "STATE",
        "QUEUE",
        "ATTAINED",
        "GITTINS",
        "PREEMPT",
        "NODES",
        "SKEW",
        "GPU_UTIL",
        "GPU_MEM",
        "WHY",
    ]
    lines = [head]
    for r in rows:
        nodes = ",".join(f"{p['node']}:{p['gpus']}" if p["gpus"] is not None else p["node"] for p in r.placement)
        state = r.state if r.final_state is None else r.final_state
        lines.append(
            [
                str(r.job_id),
                r.user[:10],
                r.name[:14],
                str(r.gpus),
                state,
                r.queue,
                _fmt_gpu_time(r.attained_gpu_seconds),
                "-" if r.gittins_index is None else f"{r.gittins_index:.3g}",
                str(r.preemptions),
                nodes or "-",
                "-" if r.skew is None else f"{r.skew:.2f}",
                *usage_cells(r),
                r.reason or "",
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head) - 1)]
    return (
        "\n".join("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1] for row in lines).rstrip()
        + "\n"
    )
