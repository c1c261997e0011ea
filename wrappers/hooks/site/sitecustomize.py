"""teiresias job hooks, put on PYTHONPATH by tsbatch's batch script.

Four things, all cheap until the script imports torch:
0. when ``TEIRESIAS_CHECKPOINT=1``, ignore USR1/USR2 if their action is the
   default one (to die), as tsbatch starts the job's processes;
1. run the ``sitecustomize`` this file shadows (the next one on sys.path), so
   site-wide customisation keeps working;
2. when ``TEIRESIAS_CHECKPOINT=1``, arm the checkpoint/resume hooks
   (wrappers.hooks.activate), which patch torch only if and when it is imported;
3. on a profiled run (``TEIRESIAS_PROFILE=1`` and ``TEIRESIAS_PROFILE_DIR``
   set by the batch script), install the profiler's model hook
   (profiler.model_hook.install: exact tensor sizes from DDP, iteration marks).
Neither hook may stop the user's program: a failure is one warning line.

This folder holds nothing but this file, so it shadows no other module.
"""

import os
import sys


def _chain_next_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # as site.py does for a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}", file=sys.stderr)


def _load_wrappers_package() -> None:
    """Make ``wrappers`` (this checkout's) importable even in an interpreter
    where teiresias is not installed, without putting the whole repo on sys.path."""
    if "wrappers" in sys.modules:
        return
    import importlib.util

    pkg_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(pkg_dir, "__init__.py")
    spec = importlib.util.spec_from_file_location("wrappers", path, submodule_search_locations=[pkg_dir])
    if spec is None or spec.loader is None:  # (a .py path always has a loader)
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["wrappers"] = module
    spec.loader.exec_module(module)


def _ignore_job_signals() -> None:
    """USR1/USR2 ignored from the start, as tsbatch starts the job's processes: a
    process exec'd by one that had the hooks' handlers (torchrun's workers) starts
    with their default action, which is to die, until its own hooks are installed."""
    import signal

    for name in ("SIGUSR1", "SIGUSR2"):
        if signal.getsignal(getattr(signal, name)) == signal.SIG_DFL:
            signal.signal(getattr(signal, name), signal.SIG_IGN)


if os.environ.get("TEIRESIAS_CHECKPOINT") == "1":
    _ignore_job_signals()
_chain_next_sitecustomize()
if os.environ.get("TEIRESIAS_CHECKPOINT") == "1":
    try:
        _load_wrappers_package()
        from wrappers.hooks import activate

        activate()
    except Exception as exc:  # never stop the user's program over our hooks
        print(f"teiresias: warning: checkpoint hooks not armed: {type(exc).__name__}: {exc}", file=sys.stderr)


def _install_model_hook() -> None:
    """profiler.model_hook.install(); its file is loaded directly where the
    ``profiler`` package is not importable (it needs nothing but the stdlib)."""
    try:
        from profiler.model_hook import install
    except ImportError:
        import importlib.util

        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        path = os.path.join(repo, "profiler", "model_hook.py")
        spec = importlib.util.spec_from_file_location("_teiresias_model_hook", path)
        if spec is None or spec.loader is None:  # (a .py path always has a loader)
            raise ImportError(f"cannot load {path}") from None
        module = importlib.util.module_from_spec(spec)
        sys.modules["_teiresias_model_hook"] = module
        spec.loader.exec_module(module)
        install = module.install
    install()


if os.environ.get("TEIRESIAS_PROFILE") == "1" and os.environ.get("TEIRESIAS_PROFILE_DIR"):
    try:
        _install_model_hook()
    except Exception as exc:  # noqa: BLE001 - profiling must never break the job
        print(f"teiresias: warning: profiler model hook not installed: {type(exc).__name__}: {exc}", file=sys.stderr)
