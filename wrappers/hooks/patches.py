"""The patches to torch, installed once right after the script imports it.

Each patch only records (weak references, positions) or calls the Runtime;
the original behaviour always runs. Per optimizer step the cost is one
Python call and a few attribute reads (benchmarks/bench_hooks.py).
"""

from __future__ import annotations

import functools
import inspect
import signal
import time
import weakref
from typing import Any

import torch
from torch.amp import grad_scaler
from torch.optim import lr_scheduler
from torch.optim import optimizer as optim_mod
from torch.utils.data import dataloader as dl

from wrappers.hooks import workers
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


def _watch_own_files(rt: Runtime) -> None:
    """The script's own checkpoints (issue 23 item 1): its ``torch.save`` calls are
    skipped before the resume point, and reading back what this job wrote, or
    loading an optimizer state the original run had not, stops a replay."""
    orig_save, orig_load = torch.save, torch.load
    orig_load_state = optim_mod.Optimizer.load_state_dict

    @functools.wraps(orig_save)
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if not rt.on_script_save(f):
            return None
        return orig_save(obj, f, *args, **kwargs)

    @functools.wraps(orig_load)
    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        rt.on_script_load(f)
        return orig_load(f, *args, **kwargs)

    @functools.wraps(orig_load_state)
    def load_state_dict(self: Any, *args: Any, **kwargs: Any) -> Any:
        rt.on_state_load()
        return orig_load_state(self, *args, **kwargs)

    torch.save, torch.load = save, load
    optim_mod.Optimizer.load_state_dict = load_state_dict  # type: ignore[method-assign]


def install(rt: Runtime) -> None:
    t = rt.tracked
    _after_init(torch.nn.Module, t.add_module)
    original_setstate = torch.nn.Module.__setstate__

    @functools.wraps(original_setstate)
    def setstate(self: Any, state: Any) -> None:  # copy.deepcopy(model): an EMA made by hand
        original_setstate(self, state)
        t.add_module(self)

    torch.nn.Module.__setstate__ = setstate  # type: ignore[method-assign]
    _after_init(optim_mod.Optimizer, lambda o: t.optimizers.append(weakref.ref(o)))
    _after_init(lr_scheduler.LRScheduler, lambda s: t.schedulers.append(weakref.ref(s)))
    _after_init(grad_scaler.GradScaler, lambda s: t.scalers.append(weakref.ref(s)))
    if not issubclass(lr_scheduler.ReduceLROnPlateau, lr_scheduler.LRScheduler):  # older torch
        _after_init(lr_scheduler.ReduceLROnPlateau, lambda s: t.schedulers.append(weakref.ref(s)))
    optim_mod.register_optimizer_step_post_hook(lambda opt, args, kwargs: rt.on_step(opt))
    _watch_own_files(rt)
    _quiet_schedulers_in_replay(rt)

    orig_iter = dl.DataLoader.__iter__
    orig_next = dl._BaseDataLoaderIter.__next__

    @functools.wraps(orig_iter)
    def loader_iter(self: Any) -> Any:
        workers.current[0] = rt.positions.worker_flag(self) if self.num_workers > 0 else None
        try:
            it, rec = rt.on_iter(
                self,
                "loader",
                lambda skip, at_start: loader_iter_at(
                    self, skip, orig_iter, orig_next, at_start, fetch=rt.fetch_skipped
                ),
            )
        finally:
            workers.current[0] = None
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

    loop_args = inspect.signature(orig_loop)

    @functools.wraps(orig_loop)
    def worker_loop(*args: Any, **kwargs: Any) -> Any:
        for name in ("SIGUSR1", "SIGUSR2", "SIGTERM"):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        bound = loop_args.bind(*args, **kwargs)
        if "collate_fn" in bound.arguments:  # does this worker draw random numbers? (workers.py)
            bound.arguments["collate_fn"] = workers.watch(bound.arguments["collate_fn"])
        return orig_loop(*bound.args, **bound.kwargs)

    torch.utils.data._utils.worker._worker_loop = worker_loop

    # GPU sharing: sub-batch + gradient accumulation when the job dir asks for it
    # (accumulate.json, read once per run). Installed last: its DataLoader split
    # wraps the position-tracking iterator above, so checkpoints fall between full batches.
    if rt.job_id:
        from wrappers.hooks import accumulate

        rt.accumulator = accumulate.install(rt.control_in(), rt.env)
