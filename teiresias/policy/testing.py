"""Tiny builders for policy tests, examples and benchmarks (no test framework needed).

snap(cluster(2, 4), pending(1, gpus=4), running(2, gpus=2, on={"s0n0": 2}))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot


def cluster(nodes: int, gpus: int, switches: int = 1) -> Cluster:
    """``switches`` x ``nodes`` nodes of ``gpus`` GPUs, named s{switch}n{node}."""
    return Cluster.from_tiresias_spec(switches, nodes, gpus)


def pending(job_id: int, gpus: int = 1, submit: float = 0.0, **kw: Any) -> Job:
    """A WAITING job; ``kw`` sets any other Job field (executed_time, first_start_time, ...)."""
    return Job(JobId(job_id), gpus, submit, **kw)


def running(job_id: int, gpus: int, on: Mapping[str, int], submit: float = 0.0, **kw: Any) -> Job:
    """A RUNNING job holding ``on`` = {node: GPUs}; first_start_time defaults to its submit time."""
    kw.setdefault("first_start_time", submit)
    placement = Placement.of(dict(on))
    if placement.num_gpus != gpus:
        raise ValueError(f"job {job_id}: placement holds {placement.num_gpus} GPUs, job needs {gpus}")
    return Job(JobId(job_id), gpus, submit, state=JobState.RUNNING, placement=placement, **kw)


def snap(c: Cluster, *jobs: Job, now: float = 0.0, unavailable: Mapping[str, int] | None = None) -> Snapshot:
    return Snapshot(now, c, list(jobs), dict(unavailable or {}))
