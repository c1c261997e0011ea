"""Sub-batch + gradient accumulation for an unmodified PyTorch script (SJF-BSBF sharing).

When the job directory holds ``accumulate.json`` (wrappers/protocol.py) with
``accumulation`` = s > 1, read once when the run starts:

- every DataLoader batch is split along dim 0 into s micro-batches
  (``torch.tensor_split``; tensors, and tuples / lists / dicts of them), which
  the script's loop receives one by one, so it runs forward + backward on
  each and its activations are those of one micro-batch;
- ``optimizer.step()`` runs only on the last micro-batch, after dividing the
  accumulated gradients by s: the mean of s micro-batch means is the
  full-batch mean when the micro-batches are equal (batch divisible by s);
- ``zero_grad()`` (optimizer or module) runs only before the first backward
  of a batch or after its real step, so the micro-batch gradients add up;
- LR scheduler steps inside a batch are skipped but on the last micro-batch,
  so a per-batch schedule counts full batches;
- DDP's gradient all-reduce runs only on the last micro-batch's backward
  (``require_backward_grad_sync``, what ``no_sync()`` sets).

Checkpoint positions still count full batches: the split sits outside the
hooks' own DataLoader patch, so a save happens between full batches.

Known exceptions to exact equivalence (docs/sjf-bsbf.md): BatchNorm
normalizes with micro-batch statistics; a loss with ``reduction="sum"`` gets
its gradients divided by s; a batch not divisible by s weighs its samples
unequally; GradScaler's ``scaler.step(opt)`` calls the optimizer as usual.
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from typing import Any, Iterator

import torch
from torch.optim import lr_scheduler
from torch.optim import optimizer as optim_mod
from torch.utils.data import dataloader as dl

from wrappers import protocol


class Accumulator:
    """Where the script is inside the current full batch."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.micro = 0  # index of the micro-batch last handed out
        self.count = steps  # micro-batches of the current batch
        self.backward_seen = False  # a backward ran in this batch
        self.stepped = False  # the real optimizer step of this batch ran
        self.ddp: list[weakref.ref] = []
        self.full_batches = 0

    @property
    def last(self) -> bool:
        return self.micro >= self.count - 1

    def begin(self, i: int, count: int) -> None:
        self.micro, self.count = i, count
        if i == 0:
            self.backward_seen = False
            self.stepped = False
            self.full_batches += 1
        sync = i == count - 1
        for ref in self.ddp:
            m = ref()
            if m is not None:
                m.require_backward_grad_sync = sync

    def may_zero(self) -> bool:
        # Before the first backward of a batch, or once its real step ran; never between micro-batches.
        return self.stepped or (self.micro == 0 and not self.backward_seen)


def split(batch: Any, n: int) -> list[Any] | None:
    """``batch`` as n micro-batches along dim 0, or None if it has no batch dimension to split."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0 or batch.shape[0] < n:
            return None
        return list(torch.tensor_split(batch, n))
    if isinstance(batch, (tuple, list)):
        parts = [split(x, n) if isinstance(x, (torch.Tensor, tuple, list, dict)) else None for x in batch]
        if not any(p is not None for p in parts):
            return None
        out = []
        for i in range(n):
            items = [p[i] if p is not None else x for p, x in zip(parts, batch)]
            out.append(type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items))
        return out
    if isinstance(batch, dict):
        keyed = {k: split(v, n) if isinstance(v, (torch.Tensor, tuple, list, dict)) else None for k, v in batch.items()}
        if not any(p is not None for p in keyed.values()):
            return None
        return [{k: (keyed[k][i] if keyed[k] is not None else v) for k, v in batch.items()} for i in range(n)]
    return None


def _micro_batches(acc: Accumulator, it: Iterator[Any]) -> Iterator[Any]:
    for batch in it:
        parts = split(batch, acc.steps)
        if parts is None:  # nothing to split (e.g. a batch smaller than s): one full step
            acc.begin(0, 1)
            yield batch
            continue
        for i, part in enumerate(parts):
            acc.begin(i, len(parts))
            yield part


class _MicroIter:
    """What ``iter(loader)`` returns: the micro-batches of the real iterator (which stays reachable)."""

    def __init__(self, acc: Accumulator, inner: Any) -> None:
        self._inner = inner
        self._gen = _micro_batches(acc, inner)

    def __iter__(self) -> "_MicroIter":
        return self

    def __next__(self) -> Any:
        return next(self._gen)

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install(jobdir: Any) -> Accumulator | None:
    """Read accumulate.json and patch torch if it asks for s > 1; returns the accumulator (or None)."""
    try:
        setting = protocol.read_accumulate(jobdir)
    except protocol.AccumulateInvalid as exc:
        print(f"teiresias: warning: gradient accumulation off: {exc}", file=sys.stderr, flush=True)
        return None
    if setting is None or setting.accumulation <= 1:
        return None
    acc = Accumulator(setting.accumulation)

    orig_iter = dl.DataLoader.__iter__

    @functools.wraps(orig_iter)
    def loader_iter(self: Any) -> Any:
        return _MicroIter(acc, orig_iter(self))

    dl.DataLoader.__iter__ = loader_iter  # type: ignore[method-assign]

    orig_backward = torch.Tensor.backward

    @functools.wraps(orig_backward)
    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        acc.backward_seen = True
        return orig_backward(self, *args, **kwargs)

    torch.Tensor.backward = backward  # type: ignore[method-assign]

    orig_module_zero = torch.nn.Module.zero_grad

    @functools.wraps(orig_module_zero)
    def module_zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        if acc.may_zero():
            return orig_module_zero(self, *args, **kwargs)
        return None

    torch.nn.Module.zero_grad = module_zero_grad  # type: ignore[method-assign]

    def wrap_optimizer(opt: Any) -> None:
        # Per instance: the class's step is torch's hooked wrapper (global post-step hooks,
        # the checkpoint runtime's count); skipping it on inner micro-batches skips those too.
        real_step, real_zero = opt.step, opt.zero_grad

        def step(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not acc.last or acc.stepped:
                return None
            n = acc.count
            if n > 1:
                with torch.no_grad():
                    for group in opt.param_groups:
                        for p in group["params"]:
                            if p.grad is not None:
                                p.grad.div_(n)
            acc.stepped = True
            return real_step(*args, **kwargs)

        def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
            if acc.may_zero():
                return real_zero(*args, **kwargs)
            return None

        # Bound methods, as torch's LR schedulers wrap ``opt.step`` expecting one.
        opt.step, opt.zero_grad = types.MethodType(step, opt), types.MethodType(zero_grad, opt)

    _after_init(optim_mod.Optimizer, wrap_optimizer)

    for cls in [c for c in vars(lr_scheduler).values() if isinstance(c, type) and "step" in vars(c)]:
        original = cls.step

        def sched_step(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            # Construction steps once (no _last_lr yet); inside a batch only the last micro-batch counts.
            if hasattr(self, "_last_lr") and not acc.last:
                return None
            return _original(self, *args, **kwargs)

        functools.update_wrapper(sched_step, original)
        cls.step = sched_step  # type: ignore[method-assign]

    from torch.nn.parallel import DistributedDataParallel as DDP

    _after_init(DDP, lambda m: acc.ddp.append(weakref.ref(m)))
    return acc


def _after_init(cls: type, record: Any) -> None:
    """Wrap ``cls.__init__`` so every instance is recorded once built (subclasses reach it via super())."""
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        record(self)

    cls.__init__ = __init__  # type: ignore[method-assign]
