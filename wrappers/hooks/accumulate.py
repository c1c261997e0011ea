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

Elastic jobs (``tsbatch --elastic MIN-MAX``, Gandiva §3.3 grow-shrink) use the
same accumulator the other way round: the script is written for MAX ranks;
at w ranks every ``MAX/w`` consecutive DataLoader batches make one optimizer
step (*grouping*, no split). With a DistributedSampler the samples of one step
are then the same as at MAX ranks (rank r's batches i..i+s-1 at w ranks cover
the indices that MAX ranks' batch i covers), so per-rank batch x accumulation
x ranks stays the job's batch; the runtime rescales the saved data position
when a checkpoint written at another size is resumed (runtime.Runtime._resized).

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
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.optim import lr_scheduler
from torch.optim import optimizer as optim_mod
from torch.utils.data import dataloader as dl

from wrappers import protocol
from wrappers.hooks.patches import _after_init


class Accumulator:
    """Where the script is inside the current full batch."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        # Until the first micro-batch is handed out the script is between full batches, as
        # right after one: a scheduler stepped there (an epoch's end, reached at once when a
        # job resumes at an epoch boundary) and zero_grad() must act as without accumulation.
        self.micro = steps - 1  # index of the micro-batch last handed out
        self.count = steps  # micro-batches of the current batch
        self.backward_seen = False  # a backward ran in this batch
        self.stepped = True  # the real optimizer step of this batch ran
        self.ddp: list[weakref.ref] = []
        self.full_batches = 0
        self.weight = 1.0  # this micro-batch's share of the step's gradient (unequal short groups)

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
        # (keyed is in batch's order)
        return [
            {k: (p[i] if p is not None else v) for (k, v), p in zip(batch.items(), keyed.values())} for i in range(n)
        ]
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


def _grouped_batches(acc: Accumulator, it: Iterator[Any]) -> Iterator[Any]:
    # Each loader batch is one micro-batch; a group of acc.steps makes a step. An
    # iteration starts a group (a resumed one starts at a saved step boundary).
    # The epoch's last group may be short (a data set not divisible by the global
    # batch, issue 23 item 4): it steps after its own last batch, as the MAX-rank
    # run steps after its short last batch, each batch weighed by its samples.
    length, first = _length(it), getattr(it, "_num_yielded", 0)
    sizes = _batch_sizes(it, length)
    for k, batch in enumerate(it):
        i = first + k  # the batch's index in the epoch
        start = i - i % acc.steps
        count = acc.steps if length is None else min(acc.steps, length - start)
        acc.begin(i - start, count)
        group = sizes[start : start + count] if sizes else []
        acc.weight = group[i - start] * count / sum(group) if group and len(set(group)) > 1 else 1.0
        yield batch
    acc.weight = 1.0


def _length(it: Any) -> int | None:
    try:
        return len(it)
    except TypeError:
        return None


def _batch_sizes(it: Any, length: int | None) -> list[int]:
    """Per-rank batch sizes of an epoch of a map-style loader with a batch size (else [])."""
    loader = getattr(it, "_teiresias_loader", None)
    b, sampler = getattr(loader, "batch_size", None), getattr(loader, "sampler", None)
    if length is None or not b or sampler is None:
        return []
    try:
        n = len(sampler)
    except TypeError:
        return []
    return [min(b, n - j * b) for j in range(length)]


def elastic_mismatch(loader: Any, env: Mapping[str, str]) -> str | None:
    """Why this loader's epochs differ between the sizes an elastic job may run at, or None.

    A DistributedSampler pads the data set (or drops its tail) to a multiple of the
    rank count, and a loader with drop_last drops each rank's short last batch: when
    the samples trained per epoch differ between MAX ranks and a smaller allowed
    size, no accumulation makes the two runs the same training."""
    from torch.utils.data import DistributedSampler

    text = env.get(protocol.ENV_ELASTIC, "")
    sampler = getattr(loader, "sampler", None)
    if not text or not isinstance(sampler, DistributedSampler):
        return None
    try:
        elastic = protocol.parse_elastic(text)
        n = len(sampler.dataset)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return None
    b = loader.batch_size or 1

    def trained(w: int) -> tuple[int, int]:
        per_rank = n // w if sampler.drop_last else -(-n // w)
        if loader.drop_last:
            per_rank = per_rank // b * b
        return per_rank * w, (-(-n // w) * w if not sampler.drop_last else n // w * w)

    want = trained(elastic.max_gpus)
    for w in range(elastic.min_gpus, elastic.max_gpus):
        if elastic.max_gpus % w == 0 and trained(w) != want:
            return (
                f"elastic {text}: the data set's {n} samples make epochs of {want[0]} samples at "
                f"{elastic.max_gpus} ranks but {trained(w)[0]} at {w} (DistributedSampler pads or drops to a "
                f"multiple of the ranks{', the loader drops short batches' if loader.drop_last else ''}); "
                f"use a data set of a multiple of {elastic.max_gpus} samples"
                f"{' and of the global batch' if loader.drop_last else ''}"
            )
    return None


class _MicroIter:
    """What ``iter(loader)`` returns: the micro-batches of the real iterator (which stays reachable)."""

    def __init__(self, acc: Accumulator, inner: Any, group: bool = False) -> None:
        self._inner = inner
        self._gen = _grouped_batches(acc, inner) if group else _micro_batches(acc, inner)

    def __iter__(self) -> _MicroIter:
        return self

    def __next__(self) -> Any:
        return next(self._gen)

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def elastic_steps(env: Mapping[str, str]) -> int:
    """Loader batches per optimizer step for an elastic job at this run's size (1: none
    to group); the size is torchrun's WORLD_SIZE. A warning and 1 when it cannot be met."""
    text = env.get(protocol.ENV_ELASTIC, "")
    if not text:
        return 1
    try:
        return protocol.parse_elastic(text).accumulation(int(env.get("WORLD_SIZE") or 1))
    except ValueError as exc:
        print(
            f"teiresias: warning: elastic accumulation off, the global batch changes with the size: {exc}",
            file=sys.stderr,
            flush=True,
        )
        return 1


def install(jobdir: Any, env: Mapping[str, str] | None = None) -> Accumulator | None:
    """Read accumulate.json (split) in ``jobdir`` (the controller's folder for the job;
    None: none to trust) or the elastic setting (group) and patch torch if it asks
    for s > 1; returns the accumulator (or None)."""
    try:
        setting = protocol.read_accumulate(jobdir) if jobdir is not None else None
    except protocol.AccumulateInvalid as exc:
        print(f"teiresias: warning: gradient accumulation off: {exc}", file=sys.stderr, flush=True)
        return None
    group = False
    if setting is None and env is not None and elastic_steps(env) > 1:
        setting, group = protocol.Accumulate(elastic_steps(env)), True
    if setting is None or setting.accumulation <= 1:
        return None
    acc = Accumulator(setting.accumulation)

    orig_iter = dl.DataLoader.__iter__

    @functools.wraps(orig_iter)
    def loader_iter(self: Any) -> Any:
        inner = orig_iter(self)
        if group:
            inner.__dict__["_teiresias_loader"] = self  # (a Consumed epoch has a __dict__ too)
        return _MicroIter(acc, inner, group)

    dl.DataLoader.__iter__ = loader_iter  # type: ignore[method-assign]

    orig_backward = torch.Tensor.backward

    @functools.wraps(orig_backward)
    def backward(self: Any, gradient: Any = None, *args: Any, **kwargs: Any) -> Any:
        acc.backward_seen = True
        if acc.weight != 1.0:
            gradient = (torch.ones_like(self) if gradient is None else gradient) * acc.weight
        return orig_backward(self, gradient, *args, **kwargs)

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

    classes: list[type[Any]] = [c for c in vars(lr_scheduler).values() if isinstance(c, type) and "step" in vars(c)]
    for cls in classes:
        original = cls.step

        def sched_step(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            # Construction steps once (no _last_lr yet); inside a batch only the last micro-batch counts.
            if hasattr(self, "_last_lr") and not acc.last:
                return None
            return _original(self, *args, **kwargs)

        functools.update_wrapper(sched_step, original)
        cls.step = sched_step

    from torch.nn.parallel import DistributedDataParallel as DDP

    _after_init(DDP, lambda m: acc.ddp.append(weakref.ref(m)))
    return acc
