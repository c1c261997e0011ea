"""The script's own Python values that training changes, saved and put back.

A script keeps training state in plain Python values too: a step counter on
an object (a Hugging Face-style ``Trainer`` stops at ``max_steps`` on
``self.state.global_step``), a local ``completed_steps`` that a warmup reads,
a module global ``iter_num``, a ``best_loss``. The replay runs the script's
code up to the resume point without training, so there such a value holds
what it held before training: the loop that stops at ``max_steps`` trained
that many steps again after every resume, a schedule computed from the
counter started over, silently.

They are found as the hooks find the modules that training changes
(state.py, extras): the first time a function's frame is seen on the stack at
a data request or an optimizer step, its values are noted (the script's setup,
the same in every run); at a checkpoint, the values on the stack that differ
from what was noted are saved with the frames they were found in; at the
resume point (the same data request, reached through the same frames) they are
put back, before the batch is fetched. What the environment sets (a rank, the
world size, a pause read from a variable) is the same before and after
training in a run and is not carried over to the next.

What is looked at: ``int``, ``float``, ``bool``, ``str``, ``None``, and tuples
or lists of those, in the locals of each frame on the stack (the hooks' and
torch's own frames excepted) and in its module's globals, and in objects
reachable from them up to ``DEPTH`` attributes or dict keys deep: plain objects,
dataclasses, dicts with ``str`` keys, and the public attributes of the script's
own ``nn.Module`` classes (not their submodules or tensors, which the model's
state carries, nor ``training``). Not looked at:
torch and NumPy objects, tensors (a running-loss tensor restarts), closures'
cells, objects only a C iterator holds (``tqdm(loader)``'s count), values
further away than ``DEPTH``.

``enumerate(loader)``'s count is put back too (``fix_enumerate``): a loader
rebuilt at position p hands out batch p first, and the ``enumerate`` around it
would number it 0 (a schedule stepped with ``epoch + i / iters``, as
CosineAnnealingWarmRestarts' documentation does, started the epoch over).
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

DEPTH = 3  # attributes/keys below a frame's variable: self.state.global_step is 2
MAX_NODES = 20_000  # objects and values looked at per frame (a huge vocabulary dict is cut off, the same way each time)
MAX_SEQUENCE = 100_000  # a longer list or tuple of scalars is not looked at
SCALARS = (bool, int, float, str, type(None))
_HOOKS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_NOT_THE_SCRIPTS = (
    "torch",
    "numpy",
    "wrappers",
    "builtins",
    "threading",
    "_thread",
    "logging",
    "multiprocessing",
    "subprocess",
    "socket",
    "io",
    "_io",
    "concurrent",
    "asyncio",
    "queue",
    "weakref",
    "_weakrefset",
)
_SKIPPED_TYPES = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.FrameType,
    types.CodeType,
    types.GeneratorType,
)

Path = tuple[tuple[str, Any], ...]  # ("l"|"g", name) then ("a", attribute) / ("k", key) steps


def _scalar(v: Any) -> bool:
    t = type(v)
    if t in SCALARS:
        return True
    return t in (tuple, list) and len(v) <= MAX_SEQUENCE and all(type(x) in SCALARS for x in v)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is float and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _frozen(v: Any) -> Any:
    """A copy that the script's later changes cannot reach (a list it appends to)."""
    return list(v) if type(v) is list else v


def _descend(o: Any) -> Iterator[tuple[tuple[str, Any], Any]]:
    """The named parts of ``o`` worth looking into: a dict's str keys, an object's attributes."""
    if type(o) is dict or (isinstance(o, dict) and type(o).__module__ == "collections"):
        for k, v in list(o.items()):
            if type(k) is str:
                yield ("k", k), v
        return
    if isinstance(o, _SKIPPED_TYPES):
        return
    d = getattr(o, "__dict__", None)
    if type(d) is not dict:
        return
    if (type(o).__module__ or "").split(".")[0] in _NOT_THE_SCRIPTS:
        return  # torch's own modules too (DDP's flags are its state, not the script's)
    torch = sys.modules.get("torch")  # (no nn.Module exists before torch is imported)
    module = torch is not None and isinstance(o, torch.nn.Module)
    for k, v in list(d.items()):
        if k.startswith("_teiresias") or (module and (k.startswith("_") or k == "training" or not _scalar(v))):
            continue  # a module's submodules, parameters, buffers and torch's flags are the model's state
        yield ("a", k), v


def snapshot(roots: list[tuple[tuple[str, Any], Any]]) -> dict[Path, Any]:
    """Every scalar reachable from ``roots`` within DEPTH steps, by its path."""
    out: dict[Path, Any] = {}
    seen: set[int] = set()
    budget = MAX_NODES
    stack: list[tuple[Path, Any]] = [((step,), v) for step, v in reversed(roots)]
    while stack and budget > 0:
        path, v = stack.pop()
        budget -= 1
        if _scalar(v):
            out[path] = _frozen(v)
            continue
        if len(path) > DEPTH or id(v) in seen:
            continue
        seen.add(id(v))
        children = list(_descend(v))
        stack += [((*path, step), c) for step, c in reversed(children)]
    return out


def _ours(f: types.FrameType) -> bool:
    """A frame of the hooks or of torch itself (not the script's, nor a library's it calls)."""
    code = f.f_code
    known = _OURS.get(code)
    if known is None:
        global _TORCH_DIR
        if _TORCH_DIR is None:
            file = getattr(sys.modules.get("torch"), "__file__", None)
            _TORCH_DIR = os.path.dirname(os.path.abspath(file)) + os.sep if file else _HOOKS_DIR
        known = _OURS[code] = code.co_filename.startswith((_HOOKS_DIR, _TORCH_DIR))
    return known


_TORCH_DIR: str | None = None
_OURS: dict[types.CodeType, bool] = {}


def _script_frames(start: types.FrameType | None) -> list[types.FrameType]:
    """The frames of the script (and of libraries it calls) from ``start`` outward,
    outermost first: the hooks' and torch's own frames left out."""
    out = []
    f = start
    while f is not None:
        if not _ours(f):
            out.append(f)
        f = f.f_back
    out.reverse()
    return out


def _where(f: types.FrameType) -> list[Any]:
    code = f.f_code
    return [code.co_filename, getattr(code, "co_qualname", code.co_name), code.co_firstlineno, f.f_lineno]


def _roots(f: types.FrameType) -> tuple[list[tuple[tuple[str, Any], Any]], list[tuple[tuple[str, Any], Any]]]:
    """(locals, globals) of a frame; a module's frame has only its globals."""
    glob = [(("g", k), v) for k, v in f.f_globals.items() if not (k.startswith("__") and k.endswith("__"))]
    if f.f_locals is f.f_globals:
        return [], glob
    return [(("l", k), v) for k, v in f.f_locals.items()], glob


class RestoreError(Exception):
    """The saved values cannot be put back where they were."""


@dataclass
class ScriptVars:
    """Per process: what each function's frame held when first seen (``sight``), the
    values to save (``capture``) and putting them back (``restore``)."""

    noted: dict[Any, dict[Path, Any]] = field(default_factory=dict)  # code object -> its locals' first values
    noted_globals: dict[str, dict[Path, Any]] = field(default_factory=dict)  # module name -> its globals' first values
    # (id, code) of the frames walked: a hit is that frame (or one of the same code: its
    # code is noted either way), so the walk stops there
    _walked: set[tuple[int, Any]] = field(default_factory=set)

    def sight(self, start: types.FrameType | None) -> None:
        """At a data request or an optimizer step: note the frames not seen before.
        The walk outward stops at a frame walked before (its callers are the same
        frames too): a step costs about one frame's look."""
        f = start
        while f is not None:
            if not _ours(f):
                key = (id(f), f.f_code)
                if key in self._walked:
                    return
                if len(self._walked) > 4096:  # frames long gone (an id may come back: harmless, see above)
                    self._walked.clear()
                self._walked.add(key)
                self._note(f)
            f = f.f_back

    def _note(self, f: types.FrameType) -> None:
        name = f.f_globals.get("__name__", "")
        if f.f_code in self.noted and name in self.noted_globals:
            return
        loc, glob = _roots(f)
        if f.f_code not in self.noted:
            self.noted[f.f_code] = snapshot(loc)
        if name not in self.noted_globals:
            self.noted_globals[name] = snapshot(glob)

    def capture(self, start: types.FrameType | None) -> dict[str, Any]:
        """The values on the stack that differ from what their frames first held, with the
        frames they are in: ``{"frames": [[file, function, first line, line], ...],
        "entries": [[frame index, [[kind, name], ...], value], ...]}``."""
        frames = _script_frames(start)
        entries: list[list[Any]] = []
        done_globals: set[str] = set()
        for i, f in enumerate(frames):
            first = self.noted.get(f.f_code)
            loc, glob = _roots(f)
            if first is not None:
                entries += _changed(i, snapshot(loc), first)
            name = f.f_globals.get("__name__", "")
            first_g = self.noted_globals.get(name)
            if first_g is not None and name not in done_globals:
                done_globals.add(name)
                entries += _changed(i, snapshot(glob), first_g)
        return {"frames": [_where(f) for f in frames], "entries": entries}

    def restore(self, saved: dict[str, Any] | None, start: types.FrameType | None) -> int:
        """Put the saved values back into the frames on the stack now (the resume point);
        returns how many. RestoreError: the stack is not the one they were saved from,
        or a value's place is missing."""
        if not saved or not saved.get("entries"):
            return 0
        frames = _script_frames(start)
        now = [_where(f) for f in frames]
        if now != saved["frames"]:
            raise RestoreError(
                f"the checkpoint was taken in {_describe(saved['frames'])}, this run reached it in {_describe(now)}"
            )
        for index, path, value in saved["entries"]:
            _put(frames[index], [tuple(step) for step in path], value)
        return len(saved["entries"])


def _changed(index: int, now: dict[Path, Any], first: dict[Path, Any]) -> list[list[Any]]:
    missing = object()
    return [
        [index, [list(step) for step in path], v] for path, v in now.items() if not _same(first.get(path, missing), v)
    ]


def _describe(frames: list[list[Any]]) -> str:
    return " <- ".join(f"{os.path.basename(f[0])}:{f[1]}:{f[3]}" for f in reversed(frames[-3:])) or "no frame"


def _put(frame: types.FrameType, path: list[tuple[str, Any]], value: Any) -> None:
    (kind, name), rest = path[0], path[1:]
    if not rest:
        if kind == "g":
            frame.f_globals[name] = _fresh(frame.f_globals.get(name), value)
        elif type(frame.f_locals.get(name)) is list and type(value) is list:
            _fresh(frame.f_locals[name], value)
        else:
            _set_local(frame, name, value)
        return
    scope = frame.f_globals if kind == "g" else frame.f_locals
    if name not in scope:
        raise RestoreError(f"{name} does not exist at the resume point")
    obj = scope[name]
    for kind, name in rest[:-1]:
        obj = _child(obj, kind, name)
    kind, name = rest[-1]
    if kind == "k":
        if not isinstance(obj, dict):
            raise RestoreError(f"{_dotted(path)}: not a dict at the resume point")
        obj[name] = _fresh(obj.get(name), value)
    else:
        d = getattr(obj, "__dict__", None)
        if not isinstance(d, dict):
            raise RestoreError(f"{_dotted(path)}: no attributes at the resume point")
        d[name] = _fresh(d.get(name), value)


def _child(obj: Any, kind: str, name: Any) -> Any:
    try:
        return obj[name] if kind == "k" else obj.__dict__[name]
    except (KeyError, TypeError, AttributeError):
        raise RestoreError(f"{name} does not exist at the resume point") from None


def _fresh(current: Any, value: Any) -> Any:
    """A list is refilled in place (other names for it see the same), anything else replaced."""
    if type(current) is list and type(value) is list:
        current[:] = value
        return current
    return value


def _dotted(path: list[tuple[str, Any]]) -> str:
    return ".".join(str(name) for _, name in path)


def _set_local(frame: types.FrameType, name: str, value: Any) -> None:
    """Write a local of a running frame: Python 3.13's f_locals writes through (PEP 667);
    before, the frame's dict is copied back into its fast locals."""
    if sys.version_info >= (3, 13):
        frame.f_locals[name] = value
        return
    frame.f_locals[name] = value
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


# ---------------------------------------------------------------------- enumerate
_ENUM_PROBE = 7_654_321


def _index_offset() -> int | None:
    """Where CPython keeps an enumerate object's count (after the object header),
    checked on a probe: None where it is not there."""
    if sys.implementation.name != "cpython":
        return None
    probe = enumerate(iter(()), _ENUM_PROBE)
    offset = object.__basicsize__
    if ctypes.c_ssize_t.from_address(id(probe) + offset).value != _ENUM_PROBE:
        return None
    return offset


def fix_enumerate(iterator: Any, skipped: int) -> bool:
    """Add ``skipped`` (the batches a rebuilt iterator skipped) to the count of every
    ``enumerate`` of the script that wraps ``iterator``; it has numbered nothing of it
    yet, so its count is its start. Through the hooks' gradient accumulation
    (accumulate.py) the script's loop sees its micro-batches: the enumerate around
    those counts on by as many. (The hooks use no enumerate around a loader's
    iterator: an executing generator's would not be told from the script's.)
    False: one could not be set (not CPython's layout)."""
    import gc

    ok = True
    for r in gc.get_referrers(iterator):
        if type(r) is enumerate:
            ok = _bump(r, skipped) and ok
            continue
        # An object holding the iterator in its attributes refers to it itself, or
        # through its __dict__ once that dict exists.
        holders = [o for o in gc.get_referrers(r) if getattr(o, "__dict__", None) is r] if type(r) is dict else [r]
        for o in holders:
            if callable(getattr(type(o), "teiresias_per_batch", None)):
                ok = fix_enumerate(o, skipped * o.teiresias_per_batch()) and ok
    return ok


def _bump(e: enumerate[Any], skipped: int) -> bool:
    offset = _index_offset()
    if offset is None:
        return False
    count = _count(e) + skipped
    ctypes.c_ssize_t.from_address(id(e) + offset).value = count
    return _count(e) == count


def _count(e: enumerate[Any]) -> int:
    """The number an enumerate gives its next item (its pickling state)."""
    state: tuple[Any, int] = e.__reduce__()[1]  # type: ignore[assignment]
    return state[1]
