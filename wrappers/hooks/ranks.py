"""Rank agreement: every rank of a job stops, parks and saves after the same step.

With several ranks, the stop reason and the suspend request are agreed on by
one all-reduce MAX on a gloo group of the job's own (docs/checkpointing.md),
so a signal that reached one rank stops them all at the same optimizer step;
the save gathers every rank's local state on rank 0.
"""

from __future__ import annotations

import os
from typing import Any

import torch


class Ranks:
    """This process's rank and the job's world, before and after init_process_group."""

    def __init__(self, env: os._Environ[str] | dict[str, str]) -> None:
        self.env = env
        self._group: Any = None  # gloo group for the stop agreement

    @staticmethod
    def dist() -> Any:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed
        return None

    def rank(self) -> int:
        d = self.dist()
        if d:
            return int(d.get_rank())
        # Before init_process_group: torchrun sets RANK, srun SLURM_PROCID.
        return int(self.env.get("RANK") or self.env.get("SLURM_PROCID") or 0)

    def world(self) -> int:
        d = self.dist()
        return int(d.get_world_size()) if d else 1

    def group(self) -> Any:
        if self._group is None:
            # Every rank gets here at the same step boundary, so new_group is collective-safe.
            self._group = torch.distributed.new_group(backend="gloo")
        return self._group

    def agree(self, stop: int, suspend: bool) -> tuple[int, bool]:
        """The largest stop and any suspend among all ranks: one all-reduce for both."""
        if self.world() <= 1:
            return stop, suspend
        t = torch.tensor([stop, int(suspend)], dtype=torch.int64)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=self.group())
        return int(t[0].item()), bool(t[1].item())

    def gather(self, local: dict[str, Any]) -> list[Any] | None:
        """Every rank's ``local`` on rank 0 (None elsewhere)."""
        world = self.world()
        if world <= 1:
            return [local]
        gathered: list[Any] | None = [None] * world if self.rank() == 0 else None
        torch.distributed.gather_object(local, gathered, dst=0, group=self.group())
        return gathered

    def barrier(self) -> None:
        if self.world() > 1:
            torch.distributed.barrier(group=self.group())
