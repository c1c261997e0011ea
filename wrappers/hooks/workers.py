"""DataLoader worker processes and their random numbers (issue 23 item 2).

A worker seeds Python's, NumPy's and torch's generators from the loader's base
seed and its id, then draws from them in the dataset (random augmentation, as
torchvision's transforms do with torch's generator). Its generators' states
depend on every batch it fetched before. The main process cannot read them,
so the hooks only learn *whether* a loader's workers draw: each worker compares
its generators' states around its first batches and sets a byte shared with
the main process (``new_flag``; inherited by the forked workers).

- Workers made for each epoch (``persistent_workers=False``): a resumed run
  fetches the batches before the checkpoint's position through its new workers
  and drops them (positions.loader_iter_at ``fetch``), so each worker draws
  again what it drew for them: the same augmentation, bitwise. It costs the
  loading of those batches (at most one epoch's), no training.
- Persistent workers keep their generators from epoch to epoch: a resumed run
  could only bring them back by fetching every earlier epoch again. The hooks
  refuse such a loader with one line (Runtime.on_step) rather than resume it
  differently.
"""

from __future__ import annotations

import multiprocessing
import random
from typing import Any

import torch

# The flag of the loader whose iterator is being made: workers are forked then and keep it.
current: list[Any] = [None]

CHECKED_BATCHES = 3  # batches per worker after which it stops comparing states


def new_flag() -> Any:
    """A byte in shared memory, 0 until a worker of the loader draws a random number."""
    return multiprocessing.RawValue("b", 0)


def _states() -> tuple[Any, ...]:
    out: tuple[Any, ...] = (random.getstate(), torch.get_rng_state().numpy().tobytes())  # (bytes: comparable)
    try:
        import numpy as np

        state: Any = np.random.get_state(legacy=True)  # (name, keys, pos, has_gauss, cached)
        out += (np.asarray(state[1]).tobytes(), state[2])
    except ImportError:
        pass
    return out


class WatchingCollate:
    """The loader's collate_fn in a worker: between two batches, did the generators move?"""

    def __init__(self, inner: Any, flag: Any) -> None:
        self.inner, self.flag = inner, flag
        self.last: tuple[Any, ...] | None = None
        self.seen = 0

    def __call__(self, batch: Any) -> Any:
        if self.seen <= CHECKED_BATCHES and not self.flag.value:
            now = _states()
            if self.last is not None and now != self.last:
                self.flag.value = 1
            self.seen += 1
            out = self.inner(batch)
            self.last = _states()  # after collate: only the next batch's fetching moves them
            return out
        return self.inner(batch)


def watch(collate_fn: Any) -> Any:
    """``collate_fn`` for a worker being started (the main process's current flag)."""
    flag = current[0]
    return collate_fn if flag is None else WatchingCollate(collate_fn, flag)
