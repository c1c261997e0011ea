"""Communication profiler (Tiresias §3.3.1): an LD_PRELOAD interposer that
records a training job's communication for a short window, and the Python
side that turns the records into a ``Profile`` (iteration period, bytes per
iteration, skew).

Entry points for other parts of teiresias:
- ``profiler.env.profiling_env(jobdir, ...)``: environment for a profiled run.
- ``profiler.model_hook.install()``: exact tensor sizes from DDP (sitecustomize).
- ``profiler.aggregate.aggregate_dir(profile_dir)``: records -> Profile.
- ``profiler.store.ProfileStore``: profiles kept by model/script for reuse.
- ``profiler.packlimit.fit_packlimit(history, ...)``: PACKLIMIT from history.
"""

from __future__ import annotations

from pathlib import Path

from teiresias.errors import TeiresiasError

__all__ = ["ProfilerUnavailable", "library_path"]

_LIB_GLOB = "_tprof*.so"


class ProfilerUnavailable(TeiresiasError):
    """The interposer library was not built."""


def library_path() -> Path:
    """Absolute path of the built interposer (for LD_PRELOAD).

    setup.py builds it next to this file on ``pip install`` (in the source
    tree for editable installs, in site-packages otherwise).
    """
    here = Path(__file__).resolve().parent
    found = sorted(here.glob(_LIB_GLOB))
    if not found:
        raise ProfilerUnavailable(
            f"profiler library not built in {here}; run `pip install -e .` (or scripts/bootstrap.sh)"
        )
    return found[0]
