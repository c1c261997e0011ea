"""The patches to torch, installed once right after the script imports it.

Each patch only records (weak references, positions) or calls the Runtime;
the original behaviour always runs. Per optimizer step the cost is one
Python call and a few attribute reads (benchmarks/bench_hooks.py).
"""

from __future__ import annotations

import functools
import signal
import time
import weakref
from typing import Any

import torch
from torch.amp import grad_scaler
from torch.optim import lr_scheduler
from torch.optim import optimizer as optim_mod
from torch.utils.data import dataloader as dl

from wrappers.hooks.positions import loader_iter_at
from wrappers.hooks.runtime import Runtime


def _after_init(cls: type[Any], record: Any) -> None:
    """Wrap ``cls.__init__`` so every instance is recorded once it is built (subclasses reach
    it via super()); wrappers/hooks/accumulate.py uses it too."""
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        record(self)

    cls.__init__ = __init__


def _quiet_schedulers_in_replay(rt: Runtime) -> None:
    """While replaying up to the resume point, scheduler steps of the epochs that
    come out empty are void (the restore overwrites every scheduler), so skip
    them: no work, and no "lr_scheduler.step() before optimizer.step()" warning.
    A scheduler still being constructed (no ``_last_lr`` yet) steps as usual."""
    classes = [
        c
        for c in vars(lr_scheduler).values()
        if isinstance(c, type)
        and "step" in vars(c)
        and (issubclass(c, lr_scheduler.LRScheduler) or c is lr_scheduler.ReduceLROnPlateau)
    ]
    for cls in classes:
        original = cls.step

        def step(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if rt.replaying and hasattr(self, "_last_lr"):
                return None
            return _original(self, *args, **kwargs)

        functools.update_wrapper(step, original)
        cls.step = step  # type: ignore[method-assign]


def install(rt: Runtime) -> None:
    t = rt.tracked
    _after_init(torch.nn.Module, t.modules.add)
    _after_init(optim_mod.Optimizer, lambda o: t.optimizers.append(weakref.ref(o)))
    _after_init(lr_scheduler.LRScheduler, lambda s: t.schedulers.append(weakref.ref(s)))
    _after_init(grad_scaler.GradScaler, lambda s: t.scalers.append(weakref.ref(s)))
    if not issubclass(lr_scheduler.ReduceLROnPlateau, lr_scheduler.LRScheduler):  # older torch
        _after_init(lr_scheduler.ReduceLROnPlateau, lambda s: t.schedulers.append(weakref.ref(s)))
    optim_mod.register_optimizer_step_post_hook(lambda opt, args, kwargs: rt.on_step(opt))
    _quiet_schedulers_in_replay(rt)

    orig_iter = dl.DataLoader.__iter__
    orig_next = dl._BaseDataLoaderIter.__next__

    @functools.wraps(orig_iter)
    def loader_iter(self: Any) -> Any:
        it, rec = rt.on_iter(
            self, "loader", lambda skip, at_start: loader_iter_at(self, skip, orig_iter, orig_next, at_start)
        )
        if rec is not None:
            it._teiresias_rec = rec
        return it

    @functools.wraps(orig_next)
    def loader_next(self: Any) -> Any:
        rec = self.__dict__.get("_teiresias_rec")
        if rec is None:
            return orig_next(self)
        if not rt.on_next(rec):
            raise StopIteration
        t0 = time.perf_counter()
        try:
            data = orig_next(self)
        except StopIteration:
            rt.positions.finished(rec)
            raise
        rt.timer.waited(time.perf_counter() - t0)  # input wait: not device time (steptime.py)
        rec.pos += 1
        return data

    dl.DataLoader.__iter__ = loader_iter  # type: ignore[method-assign]
    dl._BaseDataLoaderIter.__next__ = loader_next  # type: ignore[method-assign]

    # DataLoader workers get the job's signals too (scancel --full): they must
    # neither die of them (the main process would raise "worker killed") nor
    # act on them. They end with the main process, as always.
    orig_loop = torch.utils.data._utils.worker._worker_loop

    @functools.wraps(orig_loop)
    def worker_loop(*args: Any, **kwargs: Any) -> Any:
        for name in ("SIGUSR1", "SIGUSR2", "SIGTERM"):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        return orig_loop(*args, **kwargs)

    torch.utils.data._utils.worker._worker_loop = worker_loop

    # GPU sharing: sub-batch + gradient accumulation when the job dir asks for it
    # (accumulate.json, read once per run). Installed last: its DataLoader split
    # wraps the position-tracking iterator above, so checkpoints fall between full batches.
    if rt.job_id:
        from wrappers.hooks import accumulate

        rt.accumulator = accumulate.install(rt.control_in(), rt.env)
