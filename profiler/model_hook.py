"""Exact tensor sizes from the model itself, for PyTorch jobs (Tiresias §3.3.1).

Traffic cannot see tensors through DDP's gradient buckets for small models;
the model can. ``install()`` wraps ``DistributedDataParallel.__init__`` so that,
in a profiled run (TEIRESIAS_PROFILE_DIR set), rank 0 writes its parameter
sizes to ``<profile dir>/model-rank0.json`` and every forward pass marks an
iteration in the interposer (``tprof_mark_iteration``), which makes the
TEIRESIAS_PROFILE_ITERS window work; at normal interpreter exit it marks the
record file complete (``tprof_finish``).

It is meant for the job wrapper's sitecustomize: it does not import torch
(it waits for torch's DDP module to be imported by the script) and it never
lets a failure of its own reach the training script.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

TARGET = "torch.nn.parallel.distributed"
ENV_DIR = "TEIRESIAS_PROFILE_DIR"
_PATCHED = "_teiresias_profiled"


def install() -> bool:
    """Hook DDP construction in this process; True if the hook is (or will be) active.

    No-op (False) when the process is not being profiled.
    """
    if not os.environ.get(ENV_DIR):
        return False
    if not getattr(install, "_atexit", False):
        # Mark the record file complete while Python exits normally, before
        # C++ teardown can abort (torch 2.13 sometimes does, profiler or not).
        atexit.register(_finish)
        install._atexit = True  # type: ignore[attr-defined]
    mod = sys.modules.get(TARGET)
    if mod is not None:
        _patch(mod)
        return True
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    return True


def model_file(profile_dir: str | os.PathLike[str], rank: int) -> Path:
    return Path(profile_dir) / f"model-rank{rank}.json"


def write_model_file(
    module: Any, profile_dir: str | os.PathLike[str], rank: int, bucket_cap_mb: float | None = None
) -> Path:
    """Write the trainable parameters' byte sizes of ``module`` (atomically)."""
    tensors = [
        [name, int(p.numel()) * int(p.element_size())] for name, p in module.named_parameters() if p.requires_grad
    ]
    # Embeddings with sparse gradients: DDP reduces them outside its buckets, in
    # collectives sized by each batch's rows (profiler.aggregate refuses to guess).
    sparse = [
        f"{prefix}.weight" if prefix else "weight"
        for prefix, m in module.named_modules()
        if getattr(m, "sparse", False) is True and getattr(m, "weight", None) is not None
    ]
    path = model_file(profile_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"rank": rank, "bucket_cap_mb": bucket_cap_mb, "tensors": tensors, "sparse": sparse}, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _iteration_marker() -> Callable[[], None] | None:
    """tprof_mark_iteration from the preloaded interposer, if it is loaded."""
    try:
        fn = ctypes.CDLL(None).tprof_mark_iteration
    except (AttributeError, OSError):
        return None
    fn.restype = None
    fn.argtypes = []
    return fn


def _finish() -> None:
    try:
        fn = ctypes.CDLL(None).tprof_finish
    except (AttributeError, OSError):
        return
    fn.restype = None
    fn()


def _rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001 - never break the job
        pass
    return int(os.environ.get("RANK", "0") or 0)


def _patch(mod: ModuleType) -> None:
    cls = getattr(mod, "DistributedDataParallel", None)
    if cls is None or getattr(cls.__init__, _PATCHED, False):
        return
    original = cls.__init__
    mark = _iteration_marker()

    def __init__(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        original(self, module, *args, **kwargs)
        try:
            profile_dir = os.environ.get(ENV_DIR)
            if profile_dir and _rank() == 0:
                write_model_file(module, profile_dir, 0, kwargs.get("bucket_cap_mb"))
            if mark is not None:
                self.register_forward_pre_hook(lambda _m, _i: mark())
        except Exception as exc:  # noqa: BLE001 - profiling must never break training
            print(f"teiresias profiler: model hook skipped: {exc}", file=sys.stderr)

    setattr(__init__, _PATCHED, True)
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        try:
            _patch(module)
        except Exception as exc:  # noqa: BLE001
            print(f"teiresias profiler: model hook skipped: {exc}", file=sys.stderr)


class _Finder(importlib.abc.MetaPathFinder):
    """Patches DDP right after torch imports it, then steps aside."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None
