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
    created: int = 0  # modules made so far: each gets its number (creation order)
    training: bool = False  # an optimizer has stepped in this process

    def add_module(self, m: torch.nn.Module) -> None:
        """A module made by ``__init__`` or copied (``copy.deepcopy``, a hand-made EMA)."""
        self.created += 1
        for key in ("_teiresias_v0", "_teiresias_extra"):  # a copy's, taken from its original
            m.__dict__.pop(key, None)
        m.__dict__["_teiresias_seq"] = self.created
        self.modules.add(m)
        if self.training:  # made while training (an EMA of the trained model): compare from now
            m.__dict__["_teiresias_v0"] = _versions(m)

    def training_started(self) -> None:
        """At the first optimizer step: what every module holds now is the script's setup
        (the same in every run); a module whose tensors change from here on is training state."""
        if not self.training:
            self.training = True
            for m in self.outermost():
                m.__dict__["_teiresias_v0"] = _versions(m)

    def outermost(self) -> list[torch.nn.Module]:
        """Tracked modules no other tracked module contains, in creation order."""
        mods = list(self.modules)
        inner: set[int] = set()
        for m in mods:
            for child in m.modules():
                if child is not m:
                    inner.add(id(child))
        return sorted((m for m in mods if id(m) not in inner), key=lambda m: m.__dict__.get("_teiresias_seq", 0))

    def extras(self) -> list[torch.nn.Module]:
        """The script's other stateful modules (issue 23 item 3): not a model (no optimizer
        owns their parameters) but changed by training, as an EMA copy
        (``torch.optim.swa_utils.AveragedModel``) or BatchNorm statistics of a frozen
        network in train mode. Untouched ones (a frozen teacher) hold what the script's
        setup gives them in every run and are not saved."""
        models = {id(m) for m in self.models()}
        out = []
        for m in self.outermost():
            if id(m) in models or not _versions(m):
                continue
            if m.__dict__.get("_teiresias_extra") or _versions(m) != m.__dict__.get("_teiresias_v0", ()):
                out.append(m)
        return out

    def candidates(self, cls: str, keys: list[str]) -> list[torch.nn.Module]:
        """Outermost non-model modules of this signature, in creation order: an extra is
        found again by its rank among them."""
        models = {id(m) for m in self.models()}
        return [
            m
            for m in self.outermost()
            if id(m) not in models and _signature(m, m.state_dict()) == {"class": cls, "keys": keys}
        ]

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
        ranked = []
        for m in self.outermost():
            first = min((order[id(p)] for p in m.parameters() if id(p) in order), default=None)
            if first is not None:
                ranked.append((first, m))
        ranked.sort(key=lambda t: t[0])
        return [m for _, m in ranked]


def _versions(m: torch.nn.Module) -> tuple[tuple[int, int], ...]:
    """Which tensors a module holds and how often each was changed in place."""
    return tuple((id(t), t._version) for t in (*m.parameters(), *m.buffers()))


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
        "extras": _capture_extras(tracked),
    }


def _capture_extras(tracked: Tracked) -> list[dict[str, Any]]:
    out = []
    for m in tracked.extras():
        sd = m.state_dict()
        sig = _signature(m, sd)
        rank = [id(c) for c in tracked.candidates(sig["class"], sig["keys"])].index(id(m))
        out.append({**sig, "rank": rank, "state": sd})
    return out


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
    for e in shared.get("extras", []):
        found = tracked.candidates(e["class"], e["keys"])
        if e["rank"] >= len(found):
            raise StateMismatch(
                f"the checkpoint holds a {e['class']} (a module changed by training, e.g. an EMA copy) "
                f"this run has not made by the resume point"
            )
        found[e["rank"]].load_state_dict(e["state"])
        found[e["rank"]].__dict__["_teiresias_extra"] = True  # state from now on, changed or not


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
