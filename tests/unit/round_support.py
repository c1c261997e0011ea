"""What the fast tests of a controller round on injected Slurm data share: the jobs
Slurm shows (a fresh submission, a job on a GPU shard), and a backend that fails any call.

Beside (never instead of) the real-Slurm tests in tests/slurm/: a round fed
``squeue``'s data directly needs no Slurm as long as no action is due.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurm_plugin.backends.base import HOLD_MARK, SlurmBackend, SlurmJob


def held_job(job_id: int = 1, **changes: Any) -> SlurmJob:
    """A 2-GPU job just submitted to partition gpu, PENDING and held by etc/job_submit.lua
    (its hold mark in AdminComment), as the controller finds every job it manages;
    ``changes`` override fields."""
    fields: dict[str, Any] = dict(
        job_id=job_id,
        name="j",
        user="u",
        account="a",
        partition="gpu",
        state="PENDING",
        state_reason="JobHeldUser",
        priority=0,
        restart_count=0,
        requeue=True,
        held=True,
        gpus=2,
        num_nodes=1,
        nodes=(),
        required_nodes=(),
        submit_time=100.0,
        eligible_time=None,
        start_time=None,
        end_time=None,
        time_limit_minutes=None,
        command="x",
        comment="",
        admin_comment=HOLD_MARK,
    )
    return SlurmJob(**{**fields, **changes})


def shard_job(job_id: int, state: str, nodes: Sequence[str] = (), **changes: Any) -> SlurmJob:
    """A released 1-GPU job of alice's on one GPU shard, as squeue reports it to the
    controller's GPU sharing and Gandiva's slicing; ``changes`` override fields."""
    fields: dict[str, Any] = dict(
        name=f"j{job_id}",
        user="alice",
        state=state,
        state_reason="None",
        priority=5,
        held=False,
        gpus=1,
        nodes=tuple(nodes),
        submit_time=10.0 + job_id,
        admin_comment="",
        gpus_per_node=1,
        shards=1,
    )
    return held_job(job_id, **{**fields, **changes})


def _refuse(name: str):
    def call(self, *args, **kwargs):
        raise AssertionError(f"the round called backend.{name}")

    return call


class NoBackend(SlurmBackend):
    """Not a stand-in for Slurm: these rounds get Slurm's data injected and must not act,
    so every backend call fails the test."""


for _name in (
    "jobs",
    "nodes",
    "hold",
    "release",
    "set_priority",
    "set_nodelist",
    "signal",
    "requeue",
    "clear_begin_time",
    "cancel",
    "set_hold_mark",
):
    setattr(NoBackend, _name, _refuse(_name))
NoBackend.__abstractmethods__ = frozenset()
