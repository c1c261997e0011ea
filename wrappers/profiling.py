"""Whether tsbatch profiles a job's communication, and with what (Tiresias §3.3.1).

Tiresias profiles a job only when its model has not been profiled before
(Pseudocode 2, line 21), and only multi-GPU jobs communicate. So the default
is: on for a job asking for more than one GPU whose model key (the Slurm job
name, as the controller's SkewBook keys it) has no profile in the
controller's ProfileStore; off otherwise. ``--profile``/``--no-profile`` win.

The store is found at submit time: ``$TEIRESIAS_PROFILE_STORE``, else the
``profile_store`` of the site's config (``$TEIRESIAS_CONFIG``, else
``/etc/teiresias/teiresias.yaml``: teiresias/jobfiles.py ``config_path``) when
that file is readable. A store or config that
cannot be read means "not profiled before": profiling once more costs a few
seconds of recording, a wrong "known" would cost the job its placement.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from profiler.env import ENV_ITERS, ENV_MAX_BYTES, ENV_SECONDS, ProfileWindow
from teiresias.errors import ConfigError, TeiresiasError
from teiresias.jobfiles import ENV_CONFIG, ENV_PROFILE_STORE, config_path

ENV_STORE = ENV_PROFILE_STORE
__all__ = ["ENV_CONFIG", "ENV_STORE", "Decision", "decide", "profiled_before", "store_root", "window_from_env"]
# Window settings a user may give at submit time are profiler.env's variables
# (ENV_SECONDS, ENV_ITERS, ENV_MAX_BYTES), imported above.


@dataclass(frozen=True)
class Decision:
    """Profile this job's first run or not, and why (for the user's one line)."""

    profile: bool
    why: str


def store_root(env: Mapping[str, str]) -> Path | None:
    """The controller's ProfileStore folder, or None when it cannot be found or read."""
    config = config_path(env)
    if not env.get(ENV_STORE) and not os.access(config, os.R_OK):
        return None
    # Imported here: the controller's configuration (and the policies it names)
    # would add tens of milliseconds to every tsbatch start, profiled or not.
    from teiresias.config import profile_store_root

    try:
        return profile_store_root(env, config=config)
    except TeiresiasError as exc:
        print(f"tsbatch: warning: controller config unusable ({exc}); profiling as for a new model", file=sys.stderr)
        return None


def profiled_before(job_name: str, env: Mapping[str, str]) -> bool:
    """True when the controller already holds a valid profile for this model (job name)."""
    root = store_root(env)
    if root is None or not job_name.strip():
        return False
    try:
        from profiler.store import ProfileStore, model_key

        return ProfileStore(root).has(model_key(model_name=job_name))
    except Exception:  # noqa: BLE001 - an unreadable store is "not profiled", never a failed submission
        return False


def decide(explicit: bool | None, gpus: int, job_name: str, env: Mapping[str, str]) -> Decision:
    """``explicit``: True for --profile, False for --no-profile, None for the default."""
    if explicit is not None:
        return Decision(explicit, "--profile" if explicit else "--no-profile")
    if gpus <= 1:
        return Decision(False, f"{gpus} GPU: nothing to profile")
    if profiled_before(job_name, env):
        return Decision(False, f"model {job_name!r} profiled before")
    return Decision(True, f"{gpus} GPUs, model {job_name!r} not profiled yet")


def window_from_env(env: Mapping[str, str]):
    """The profiling window, from the submitting environment (profiler.env defaults otherwise)."""
    default = ProfileWindow()
    try:
        return ProfileWindow(
            seconds=float(env.get(ENV_SECONDS) or default.seconds),
            iterations=int(env.get(ENV_ITERS) or default.iterations),
            max_bytes=int(env.get(ENV_MAX_BYTES) or default.max_bytes),
        )
    except ValueError as exc:
        raise ConfigError(
            f"profiling window: {exc}; set {ENV_SECONDS} (seconds), {ENV_ITERS} and "
            f"{ENV_MAX_BYTES} (whole numbers) or unset them"
        ) from None
