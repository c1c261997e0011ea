"""What a checkpoint holds, found without the script's help.

The script never tells us its model: we track every ``nn.Module``,
optimizer, LR scheduler and GradScaler it creates (weak references, so we
keep nothing alive), and at save time take as "models" the outermost modules
that own a parameter of some optimizer (Tiresias §4: the chief worker saves
the model; Gandiva §5.2: save only the training state, not the process).

Everything is stored as tensors and plain containers so that the loader can
use ``torch.load(weights_only=True)``: Python's and NumPy's RNG states are
turned into lists of ints here.
"""

from __future__ import annotations

import random
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Tracked:
    """Objects the script created, in creation order (weakly held)."""

    modules: weakref.WeakSet[torch.nn.Module] = field(default_factory=weakref.WeakSet)
    optimizers: list[weakref.ref] = field(default_factory=list)
    schedulers: list[weakref.ref] = field(default_factory=list)
    scalers: list[weakref.ref] = field(default_factory=list)
    registered: dict[str, Any] = field(default_factory=dict)  # api.register(): strong refs, by name

    @staticmethod
    def _alive(refs: list[weakref.ref]) -> list[Any]:
        return [o for o in (r() for r in refs) if o is not None]

    def live_optimizers(self) -> list[torch.optim.Optimizer]:
        return self._alive(self.optimizers)

    def live_schedulers(self) -> list[Any]:
        return self._alive(self.schedulers)

    def live_scalers(self) -> list[Any]:
        return self._alive(self.scalers)

    def models(self) -> list[torch.nn.Module]:
        """Outermost tracked modules owning a parameter of a live optimizer, ordered
        by where their first such parameter sits in the optimizers' parameter lists
        (deterministic across runs of the same script)."""
        order: dict[int, int] = {}
        for opt in self.live_optimizers():
            for group in opt.param_groups:
                for p in group["params"]:
                    order.setdefault(id(p), len(order))
        if not order:
            return []
        mods = list(self.modules)
        inner: set[int] = set()
        for m in mods:
            for child in m.modules():
                if child is not m:
                    inner.add(id(child))
        ranked = []
        for m in mods:
            if id(m) in inner:
                continue
            first = min((order[id(p)] for p in m.parameters() if id(p) in order), default=None)
            if first is not None:
                ranked.append((first, m))
        ranked.sort(key=lambda t: t[0])
        return [m for _, m in ranked]


def _signature(model: torch.nn.Module, sd: dict[str, Any]) -> dict[str, Any]:
    return {"class": type(model).__qualname__, "keys": sorted(sd)}


def capture_shared(tracked: Tracked) -> dict[str, Any]:
    """Model, optimizer, scheduler, scaler and registered states: the same on every rank."""
    models = []
    for m in tracked.models():
        sd = m.state_dict()
        models.append({**_signature(m, sd), "state": sd})
    return {
        "models": models,
        "optimizers": [{"class": type(o).__qualname__, "state": o.state_dict()} for o in tracked.live_optimizers()],
        "schedulers": [{"class": type(s).__qualname__, "state": s.state_dict()} for s in tracked.live_schedulers()],
        "scalers": [{"class": type(s).__qualname__, "state": s.state_dict()} for s in tracked.live_scalers()],
        "registered": {name: obj.state_dict() for name, obj in tracked.registered.items()},
    }


class StateMismatch(Exception):
    """The running script's objects do not match the checkpoint's."""


def restore_shared(tracked: Tracked, shared: dict[str, Any]) -> None:
    """Load the states into the objects this run created; models first (the
    optimizer state refers to their parameters), then optimizers, schedulers, scalers."""
    models = tracked.models()
    saved = shared["models"]
    if len(models) != len(saved):
        raise StateMismatch(f"the checkpoint has {len(saved)} model(s), this run built {len(models)}")
    for m, s in zip(models, saved):
        sd = m.state_dict()
        if _signature(m, sd) != {"class": s["class"], "keys": s["keys"]}:
            raise StateMismatch(f"model {type(m).__qualname__} does not match the checkpoint's {s['class']}")
        m.load_state_dict(s["state"])
    _load_list("optimizer", tracked.live_optimizers(), shared["optimizers"])
    _load_list("LR scheduler", tracked.live_schedulers(), shared["schedulers"])
    _load_list("GradScaler", tracked.live_scalers(), shared["scalers"])
    for name, obj in tracked.registered.items():
        if name in shared["registered"]:
            obj.load_state_dict(shared["registered"][name])


def _load_list(what: str, objs: list[Any], saved: list[dict[str, Any]]) -> None:
    if len(objs) != len(saved):
        raise StateMismatch(f"the checkpoint has {len(saved)} {what}(s), this run created {len(objs)}")
    for o, s in zip(objs, saved):
        if type(o).__qualname__ != s["class"]:
            raise StateMismatch(f"{what} {type(o).__qualname__} does not match the checkpoint's {s['class']}")
        o.load_state_dict(s["state"])


# ---------------------------------------------------------------------- RNG
def capture_rng() -> dict[str, Any]:
    """Python, NumPy (legacy global), torch CPU and CUDA generator states, as plain types."""
    version, internal, gauss = random.getstate()
    out: dict[str, Any] = {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "torch": torch.get_rng_state(),
    }
    try:
        import numpy as np

        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        out["numpy"] = {
            "name": name,
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        }
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(rng: dict[str, Any]) -> None:
    p = rng["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    torch.set_rng_state(rng["torch"])
    if "numpy" in rng:
        import numpy as np

        n = rng["numpy"]
        np.random.set_state((n["name"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
