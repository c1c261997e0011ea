"""Where a job's GPUs are: a count per node, and which GPUs of the node where known."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Allocation:
    """``gpus`` GPUs of ``node``. ``gpu_ids``: which ones (Slurm's indices on the node, as
    ``scontrol -d show job`` prints IDX), () where nobody said: policies that count GPUs
    leave it empty and the owner picks (Slurm's first fit, docs/gandiva.md). Equality and
    hashing ignore it, so a placement compares by counts as it always did; code that
    needs the indices reads them."""

    node: str
    gpus: int
    gpu_ids: tuple[int, ...] = field(default=(), compare=False)


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

    @property
    def has_ids(self) -> bool:
        """Every allocation says which GPUs it is."""
        return bool(self.allocations) and all(len(a.gpu_ids) == a.gpus for a in self.allocations)

    def ids_on(self, node: str) -> tuple[int, ...]:
        return next((a.gpu_ids for a in self.allocations if a.node == node), ())

    def same_gpus(self, other: Placement) -> bool:
        """The same GPUs: equal counts and, where both say, equal indices."""
        if self != other:
            return False
        return all(
            not a.gpu_ids or not b.gpu_ids or a.gpu_ids == b.gpu_ids
            for a, b in zip(self.allocations, other.allocations, strict=True)
        )

    @classmethod
    def of(cls, counts: dict[str, int] | list[tuple[str, int]]) -> Placement:
        items = counts.items() if isinstance(counts, dict) else counts
        return cls(tuple(Allocation(n, g) for n, g in items if g > 0))

    @classmethod
    def on(cls, gpus: dict[str, tuple[int, ...]] | list[tuple[str, tuple[int, ...]]]) -> Placement:
        """A placement naming its GPUs: {node: (indices, ...)}."""
        items = gpus.items() if isinstance(gpus, dict) else gpus
        return cls(tuple(Allocation(n, len(ids), tuple(sorted(ids))) for n, ids in items if ids))
