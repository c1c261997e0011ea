"""Where a job's GPUs are: a count per node (GPU indices inside a node are Slurm's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Allocation:
    node: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Placement:
    allocations: tuple[Allocation, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(a.node for a in self.allocations)

    @property
    def num_nodes(self) -> int:
        return len(self.allocations)

    @property
    def num_gpus(self) -> int:
        return sum(a.gpus for a in self.allocations)

    @classmethod
    def of(cls, counts: dict[str, int] | list[tuple[str, int]]) -> Placement:
        items = counts.items() if isinstance(counts, dict) else counts
        return cls(tuple(Allocation(n, g) for n, g in items if g > 0))
