"""In-job checkpoint/resume hooks for unmodified PyTorch scripts.

``activate()`` (called by site/sitecustomize.py when tsbatch set
``TEIRESIAS_CHECKPOINT=1``) only registers an import hook; torch is patched
when, and only if, the script imports it. Nothing here imports torch at
module level, so a script without torch pays one meta-path lookup per import.

Modules: runtime (signals, stop agreement, save/act/resume), state (what is
saved, found without the script's help), positions (DataLoader positions and
replay), checkpoint (atomic files, secure loading), patches (the torch
patches), api (explicit API for scripts that want control).
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from typing import Any

from wrappers import protocol

_runtime: Any = None  # wrappers.hooks.runtime.Runtime once torch is imported


def current() -> Any:
    """The process's Runtime, or None when the hooks are not active."""
    return _runtime


def activate() -> None:
    """Arm the hooks: patch torch now if imported, else when it is."""
    if os.environ.get(protocol.ENV_ENABLE) != "1":
        return
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "optim"):
        _install()
    elif not any(isinstance(f, _TorchFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchFinder())


def _install() -> None:
    global _runtime
    if _runtime is not None:
        return
    try:
        from wrappers.hooks import patches
        from wrappers.hooks.runtime import Runtime

        rt = Runtime(os.environ)
        patches.install(rt)
        rt.install_signals()
        rt.device.start(rt.rank())  # a GPU the controller named, before the script's first tensor
        _runtime = rt
    except Exception as exc:  # never stop the user's program over our hooks
        print(f"teiresias: warning: checkpoint hooks not installed: {type(exc).__name__}: {exc}", file=sys.stderr)


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps torch's loader so ``_install`` runs right after torch is executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PostImportLoader(spec.loader, self)
                return spec
        return None


class _PostImportLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, finder: _TorchFinder) -> None:
        self._inner = inner
        self._finder = finder

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        _install()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
