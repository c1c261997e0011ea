"""Explicit API for scripts that want control over checkpoint/resume.

Everything works with or without tsbatch: outside a teiresias job the
functions are harmless (``should_stop()`` is False, ``steps(n)`` is
``range(n)``, ``register`` does nothing), so a script stays runnable anywhere.

    from wrappers.hooks import api as ckpt

    ckpt.register(ema=ema_model)            # saved/restored beside what is found automatically
    for step in ckpt.steps(10_000):         # resumes at the step after the checkpoint
        loss = train_one_step(next(batches))
        if ckpt.should_stop():              # a stop was requested; the hooks save at the
            pass                            # next step boundary anyway, this is for cleanup

Docs: docs/checkpointing.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wrappers import hooks


def _rt() -> Any:
    return hooks.current()


def active() -> bool:
    """True inside a tsbatch job whose hooks are installed and whose checkpoint dir is usable."""
    rt = _rt()
    return rt is not None and rt.usable()


def register(name: str | None = None, obj: Any = None, **objects: Any) -> None:
    """Save and restore these objects too (anything with ``state_dict()`` and
    ``load_state_dict()``), under stable names: ``register("ema", ema)`` or ``register(ema=ema)``."""
    if name is not None:
        objects[name] = obj
    for key, value in objects.items():
        if not (hasattr(value, "state_dict") and hasattr(value, "load_state_dict")):
            raise TypeError(f"register({key}=...): object has no state_dict()/load_state_dict()")
    rt = _rt()
    if rt is not None:
        rt.tracked.registered.update(objects)


def should_stop() -> bool:
    """True once a preemption, time-limit or SIGTERM stop has been requested."""
    rt = _rt()
    from wrappers.hooks.runtime import Stop

    return rt is not None and bool(rt.signal_stop or rt.pending >= Stop.PREEMPT)


def checkpoint_now() -> None:
    """Ask for a checkpoint at the next step boundary (training continues)."""
    rt = _rt()
    if rt is not None:
        rt.api_request = True


def resumed_step() -> int | None:
    """The optimizer step this run resumes (or resumed) from, or None for a fresh
    start. Before the resume point is reached it names the checkpoint found."""
    rt = _rt()
    if rt is None:
        return None
    rt.ensure_loaded()
    return rt.ckpt["step"] if rt.replaying else rt.resumed_from


def steps(total: int, start: int = 0) -> StepRange:
    """``range(start, total)`` that teiresias can checkpoint and resume like a DataLoader:
    on resume it continues after the last step that was checkpointed."""
    return StepRange(start, total)


class StepRange:
    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop

    def __len__(self) -> int:
        return max(0, self.stop - self.start)

    def __iter__(self) -> Iterator[int]:
        rt = _rt()
        if rt is None:
            return iter(range(self.start, self.stop))
        it, rec = rt.on_iter(self, "steps", lambda skip, _: iter(range(self.start + skip, self.stop)))
        return it if rec is None else _StepIter(rt, rec, it)


class _StepIter:
    def __init__(self, rt: Any, rec: Any, inner: Iterator[int]) -> None:
        self.rt, self.rec, self.inner = rt, rec, inner

    def __iter__(self) -> _StepIter:
        return self

    def __next__(self) -> int:
        if not self.rt.on_next(self.rec):
            raise StopIteration
        try:
            value = next(self.inner)
        except StopIteration:
            self.rt.positions.finished(self.rec)
            raise
        self.rec.pos += 1
        return value
