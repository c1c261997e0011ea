"""Enacting a Plan.sharing decision on Slurm 22.05 (docs/sjf-bsbf.md §9).

A guest shares its host's GPU through ``gres/shard``: both jobs must be shard
jobs (a GPU held by a ``--gres=gpu`` job gives no shard to anyone). Slurm
picks the GPU itself, first fit by lowest index, and a pending job's GPU
cannot be chosen by type after submission (notes §2, §6), so the controller
pins the guest by node only and starts it only where the host's GPU is the
one GPU of that node with shards left: no idle GPU there and no other shard
job alone on its GPU. Elsewhere the guest waits, with that reason.

The pure checks are here; the loop (`Controller._start_guest`) writes the
files and calls Slurm. xi is measured from the hooks' runs.jsonl when a shared
run ends and replaces the model's guess for that model (`measured_xi`,
`with_measured`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.controller import channel
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias import jobfiles as protocol
from teiresias.domain import Placement
from teiresias.domain.plan import Sharing
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.sjf_bsbf.model import SharingModel
from teiresias.policy.sjf_bsbf.policy import MIN_HISTORY

SHARD_HINT = "submit both with --gres=shard:N (half a GPU's shards) so that Slurm can co-allocate them"


def cannot_share(
    guest: SlurmJob,
    host: SlurmJob | None,
    host_rec: JobRecord | None,
    placement: Placement,
    records: Mapping[int, JobRecord],
    slurm: Mapping[int, SlurmJob],
    free: Mapping[str, int],
    *,
    typed: bool = False,
) -> str | None:
    """Why the guest cannot be started on its host's GPU now, or None when it can.
    ``typed``: the node has one gres Type per GPU, so the guest is released on its
    host's GPU by name (controller/gpus.py) and Slurm's first fit is no concern."""
    if not guest.shards:
        return f"chosen to share job {host.job_id if host else '?'}'s GPU, but it asks for whole GPUs; {SHARD_HINT}"
    if host is None or host_rec is None or host_rec.phase is not Phase.RUNNING:
        return "chosen to share a GPU whose job is not running (not started yet, or stopping); waits for the next round"
    if not host.shards:
        return f"chosen to share job {host.job_id}'s GPU, which it holds whole (--gres=gpu); {SHARD_HINT}"
    if typed:
        return None
    for node in placement.nodes:
        if free.get(node, 0) > 0:
            return (
                f"chosen to share job {host.job_id}'s GPU on {node}, which has an idle GPU: Slurm would"
                " give the guest that one (first fit by index)"
            )
        for job_id, r in records.items():
            sj = slurm.get(job_id)
            if (
                job_id not in (host.job_id, guest.job_id)
                and r.shared_with is None
                and sj is not None
                and sj.shards
                and r.phase in (Phase.RUNNING, Phase.STARTING)
                and node in sj.nodes
            ):
                return (
                    f"chosen to share job {host.job_id}'s GPU on {node}, where job {job_id} also holds a GPU's"
                    " shards alone: Slurm, not the controller, would pick which GPU the guest gets"
                )
    return None


def audit_fields(sh: Sharing) -> dict[str, float | int]:
    """The numbers behind a pair decision (Theorem 1's two ends, the model's factors, and the
    queue check's two sums where it ran)."""
    out: dict[str, float | int] = {
        "partner": int(sh.partner),
        "sub_batch": sh.sub_batch,
        "accumulation": sh.accumulation,
        "slowdown": round(sh.slowdown, 4),
        "partner_slowdown": round(sh.partner_slowdown, 4),
        "alone_slowdown": round(sh.alone_slowdown, 4),
        "shared_avg_jct": round(sh.shared_avg_jct, 3),
        "sequential_avg_jct": round(sh.sequential_avg_jct, 3),
    }
    if sh.queue_sum_jct is not None and sh.queue_sum_jct_without is not None:
        out["queue_sum_jct"] = round(sh.queue_sum_jct, 3)
        out["queue_sum_jct_without"] = round(sh.queue_sum_jct_without, 3)
    return out


def write_accumulate(rec: JobRecord, sh: Sharing) -> Path | None:
    """accumulate.json in the controller's folder for the guest (controller/channel.py;
    read by the hooks when its run starts); None for a job without one (not a tsbatch
    job, or no place the controller may trust). OSError when it cannot be written."""
    jd = channel.folder_for_job(rec)
    if jd is None:
        return None
    protocol.write_accumulate(jd, protocol.Accumulate(sh.accumulation, sh.sub_batch))
    return jd / protocol.ACCUMULATE


def run_lines(jobdir: Path, restart: int) -> list[protocol.RunRecord]:
    """Every record of one run in runs.jsonl, oldest first (the hooks append one per
    minute with the run's step count so far); torn lines skipped."""
    try:
        lines = protocol.runs_path(jobdir).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            r = protocol.RunRecord(**json.loads(line))
        except (ValueError, TypeError):
            continue
        if r.restart_count == restart and r.steps > 0:
            out.append(r)
    return out


def step_rate(lines: list[protocol.RunRecord], start: float, end: float) -> float | None:
    """Optimizer steps per second between the first and the last record written in
    [start, end]: the counts are cumulative, so the difference is exactly the steps
    of that window. None with fewer than two records there."""
    inside = [r for r in lines if start <= r.time <= end]
    if len(inside) < 2 or inside[-1].time <= inside[0].time or inside[-1].steps <= inside[0].steps:
        return None
    return (inside[-1].steps - inside[0].steps) / (inside[-1].time - inside[0].time)


def measured_xi(
    lines: list[protocol.RunRecord], run_start: float, since: float, until: float, run_end: float
) -> float | None:
    """xi of one run that was shared during [since, until]: its step rate alone over its
    rate while shared, at the same batch (a guest keeps its sub-batch alone, so r(b)
    cancels). The alone window is before the pair (a host) or after it (a guest)."""
    shared = step_rate(lines, since, until)
    alone = step_rate(lines, run_start, since) or step_rate(lines, until, run_end)
    if shared is None or alone is None:
        return None
    return alone / shared


def histories(samples: Mapping[tuple[str, str], list[float]]) -> dict[tuple[str, str], ServiceDistribution]:
    """(user, job name) -> the GPU-time distribution of those finished jobs, for the policy's job
    lengths (``SjfBsbfPolicy.history``; keys with fewer than MIN_HISTORY jobs are left out)."""
    return {k: ServiceDistribution(v) for k, v in samples.items() if len(v) >= MIN_HISTORY}


def with_measured(model: SharingModel, measured: Mapping[str, float]) -> SharingModel:
    """The model with each measured model's interference replaced by the value measured
    live (never below 1: noise must not make sharing look free). Configured ``pairs``
    still win for their pair: an admin's measured pair is more specific."""
    if not measured:
        return model
    profiles = dict(model.profiles)
    for name, xi in measured.items():
        profiles[name] = replace(model.profile(name), interference=max(1.0, xi))
    return replace(model, profiles=profiles)
