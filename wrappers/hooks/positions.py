"""Where each DataLoader iterator (and api.steps iterator) has got, and how to
put a new iterator back there without loading the skipped batches.

An iterator is named by (ord, n): ``ord`` numbers the loaders in the order
they are first iterated, ``n`` counts the iterations of that loader (epochs).
A deterministic script iterates its loaders in the same order on every run,
so the names match across a requeue.

To resume at position ``p`` of epoch ``n`` we replay the permutation, not the
data (Gandiva §5.2: resume at the mini-batch boundary): the generators'
states as they were when that epoch's iterator was created are put back, the
iterator is built as usual (so it draws its base seed and permutation exactly
as before), and its index sampler skips ``p`` batches of indices before any
data is fetched. IterableDatasets have no indices: their batches are fetched
and dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class IterRecord:
    kind: str  # "loader" or "steps"
    ord: int
    n: int
    gens: list[torch.Tensor]  # states of the owner's generators when this iterator was made
    rng: torch.Tensor  # torch's global RNG state at that moment (samplers without a generator use it)
    pos: int = 0  # items handed out so far
    done: bool = False
    # States at this loader's first iteration: a persistent-workers iterator is
    # created then (drawing its base seed) and only reset in later epochs.
    first_gens: list[torch.Tensor] = field(default_factory=list)
    first_rng: torch.Tensor | None = None

    def key(self) -> tuple[int, int]:
        return (self.ord, self.n)

    worker_rng: bool = False  # its loader's workers drew random numbers (set at save)
    length: int = -1  # items in the iteration (-1: unknown): pos == length is its end

    def to_plain(self) -> dict[str, Any]:
        return {
            "worker_rng": self.worker_rng,
            "len": self.length,
            "kind": self.kind,
            "ord": self.ord,
            "n": self.n,
            "pos": self.pos,
            "gens": self.gens,
            "rng": self.rng,
            "first_gens": self.first_gens,
            "first_rng": self.first_rng,
        }


def generators_of(owner: Any) -> list[torch.Generator]:
    """The distinct torch.Generators a loader draws from (its own, its sampler's)."""
    found: list[torch.Generator] = []
    candidates = [getattr(owner, "generator", None)]
    sampler = getattr(owner, "sampler", None)
    candidates.append(getattr(sampler, "generator", None))
    batch_sampler = getattr(owner, "batch_sampler", None)
    candidates.append(getattr(getattr(batch_sampler, "sampler", None), "generator", None))
    for g in candidates:
        if isinstance(g, torch.Generator) and all(g is not f for f in found):
            found.append(g)
    return found


@dataclass
class Positions:
    """Per-process bookkeeping of loaders and live iterators."""

    next_ord: int = 0
    iterations: dict[int, int] = field(default_factory=dict)  # ord -> iterations started
    owners: dict[int, Any] = field(default_factory=dict)  # ord -> loader (strong: loaders live for the run)
    live: list[IterRecord] = field(default_factory=list)
    first: dict[int, tuple[list[torch.Tensor], torch.Tensor]] = field(default_factory=dict)  # ord -> states
    worker_flags: dict[int, Any] = field(default_factory=dict)  # ord -> shared byte its workers set (workers.py)

    def worker_flag(self, owner: Any) -> Any:
        """The shared byte this loader's workers set when they draw random numbers."""
        from wrappers.hooks import workers

        ord_ = self.ord_of(owner)
        if ord_ not in self.worker_flags:
            self.worker_flags[ord_] = workers.new_flag()
        return self.worker_flags[ord_]

    def worker_rng(self, ord_: int) -> bool:
        flag = self.worker_flags.get(ord_)
        return flag is not None and bool(flag.value)

    def persistent_random_workers(self) -> int | None:
        """A loader with persistent workers that draw random numbers (its ord), if any."""
        for ord_, flag in self.worker_flags.items():
            owner = self.owners.get(ord_)
            if flag.value and getattr(owner, "persistent_workers", False) and getattr(owner, "num_workers", 0) > 0:
                return ord_
        return None

    def ord_of(self, owner: Any) -> int:
        ord_ = getattr(owner, "_teiresias_ord", None)
        if ord_ is None:
            ord_ = self.next_ord
            self.next_ord += 1
            object.__setattr__(owner, "_teiresias_ord", ord_)
            self.owners[ord_] = owner
        return ord_

    def peek(self, owner: Any) -> tuple[int, int]:
        """(ord, n) of the iteration of ``owner`` that would start next."""
        ord_ = self.ord_of(owner)
        return ord_, self.iterations.get(ord_, 0)

    def start(self, owner: Any, kind: str) -> IterRecord:
        """Name the iteration about to begin and remember the generator states it starts from."""
        ord_ = self.ord_of(owner)
        n = self.iterations.get(ord_, 0)
        self.iterations[ord_] = n + 1
        rec = IterRecord(kind, ord_, n, [g.get_state() for g in generators_of(owner)], torch.get_rng_state())
        try:
            rec.length = len(owner)
        except TypeError:
            pass
        if n == 0:
            self.first[ord_] = (rec.gens, rec.rng)
        rec.first_gens, rec.first_rng = self.first.get(ord_, (rec.gens, rec.rng))
        # A new iteration of the same loader ends the previous one (persistent workers reuse it).
        self.live = [r for r in self.live if r.ord != ord_]
        self.live.append(rec)
        return rec

    def finished(self, rec: IterRecord) -> None:
        rec.done = True
        self.live = [r for r in self.live if r is not rec]

    def generator_states(self) -> list[dict[str, Any]]:
        return [{"ord": o, "gens": [g.get_state() for g in generators_of(owner)]} for o, owner in self.owners.items()]

    def restore_generator_states(self, saved: list[dict[str, Any]]) -> None:
        for item in saved:
            owner = self.owners.get(item["ord"])
            if owner is None:
                continue
            for g, state in zip(generators_of(owner), item["gens"]):
                g.set_state(state)


# ---------------------------------------------------------------------- skipping
class _SkipIter:
    def __init__(self, owner: SkippingSampler) -> None:
        self.owner = owner
        self.it: Iterator[Any] | None = None

    def prime(self) -> None:
        """Start the inner sampler and drop the consumed batches' indices (cheap: no data)."""
        if self.it is None:
            self.owner.started = True
            if self.owner.at_start is not None:
                self.owner.at_start()
            self.it = iter(self.owner.inner)
            for _ in range(self.owner.skip):
                if next(self.it, _END) is _END:
                    break

    def __iter__(self) -> _SkipIter:
        return self

    def __next__(self) -> Any:
        self.prime()
        assert self.it is not None
        return next(self.it)


_END = object()


class SkippingSampler:
    """Stands in for a loader's (batch) sampler for one iteration: the first
    iterator that is actually started skips ``skip`` items; later ones pass through."""

    def __init__(self, inner: Any, skip: int, at_start: Callable[[], None] | None = None) -> None:
        self.inner = inner
        self.skip = skip
        self.at_start = at_start  # runs just before the inner sampler starts
        self.started = False

    def __iter__(self) -> Iterator[Any]:
        return iter(self.inner) if self.started else _SkipIter(self)

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def loader_iter_at(
    loader: Any,
    skip: int,
    make: Callable[[Any], Any],
    next_: Callable[[Any], Any],
    at_start: Callable[[], None] | None = None,
    fetch: bool = False,
) -> Any:
    """A new iterator of ``loader`` (made by the original ``DataLoader.__iter__``)
    that continues after ``skip`` batches; ``at_start`` runs right before its
    sampler starts (after the iterator drew its base seed); ``fetch``: load the
    skipped batches (in the workers, which draw their random numbers again) and drop them."""
    if skip == 0 and at_start is None:
        return make(loader)
    from torch.utils.data.dataloader import _DatasetKind

    if loader._dataset_kind == _DatasetKind.Iterable or fetch:
        if at_start is not None:
            at_start()
        it = make(loader)
        for _ in range(skip):  # no indices to skip, or workers to bring where they were: fetch and drop
            next_(it)
        return it
    attr = "batch_sampler" if loader._auto_collation else "sampler"
    inner = getattr(loader, attr)
    object.__setattr__(loader, attr, SkippingSampler(inner, skip, at_start))
    try:
        it = make(loader)
    finally:
        object.__setattr__(loader, attr, inner)
    sampler_iter = getattr(it, "_sampler_iter", None)
    if isinstance(sampler_iter, _SkipIter):
        # Single-process loader: skip now, after the iterator drew its base seed,
        # which is when the original run's first next() drew the permutation.
        sampler_iter.prime()
    it._num_yielded = skip
    return it


class Consumed:
    """An iteration that was already complete before the checkpoint: yields nothing."""

    def __iter__(self) -> Consumed:
        return self

    def __next__(self) -> Any:
        raise StopIteration

    def __len__(self) -> int:
        return 0
