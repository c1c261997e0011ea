"""The environment that turns profiling on for one run of a job.

The job wrapper merges ``profiling_env(jobdir)`` into the training command's
environment on the job's profiling run (its first run, by default). The
variables are inherited through torchrun / mp.spawn / ``timeout``; note that
``srun --export=NONE`` and containers drop them (pass them explicitly there).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from profiler import library_path
from teiresias.errors import ConfigError

# Re-exported: the launcher (wrappers/batchscript.py) names them from here.
from teiresias.jobfiles import PROFILE_SUBDIR as PROFILE_SUBDIR
from teiresias.jobfiles import profile_dir as profile_dir

ENV_DIR = "TEIRESIAS_PROFILE_DIR"
ENV_SECONDS = "TEIRESIAS_PROFILE_SECONDS"
ENV_ITERS = "TEIRESIAS_PROFILE_ITERS"
ENV_MAX_BYTES = "TEIRESIAS_PROFILE_MAX_BYTES"
ENV_IGNORE_PORTS = "TEIRESIAS_PROFILE_IGNORE_PORTS"


@dataclass(frozen=True)
class ProfileWindow:
    """How long each process records (Tiresias profiles only a few iterations, §3.3.1).

    Recording stops at whichever comes first: ``seconds`` after the process's
    first collective, ``iterations`` iteration marks (needs the model hook;
    0 = no limit), or ``max_bytes`` of records per process.
    """

    seconds: float = 30.0
    iterations: int = 0
    max_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ConfigError(f"profile window seconds must be > 0, got {self.seconds}")
        if self.iterations < 0:
            raise ConfigError(f"profile window iterations must be >= 0, got {self.iterations}")
        if self.max_bytes < 4096:
            raise ConfigError(f"profile max_bytes must be >= 4096, got {self.max_bytes}")


def profiling_env(
    jobdir: str | os.PathLike[str],
    window: ProfileWindow = ProfileWindow(),
    *,
    base_env: Mapping[str, str] | None = None,
    ignore_ports: tuple[int, ...] = (),
) -> dict[str, str]:
    """Variables to add to a training command's environment to profile it.

    ``LD_PRELOAD`` keeps whatever ``base_env`` (default: os.environ) already
    preloads. MASTER_PORT (the rendezvous store) is always ignored by the
    interposer; ``ignore_ports`` adds others.
    """
    env = os.environ if base_env is None else base_env
    lib = str(library_path())
    existing = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p and p != lib]
    out = {
        "LD_PRELOAD": ":".join([lib, *existing]),
        ENV_DIR: str(profile_dir(jobdir).resolve()),
        ENV_SECONDS: repr(float(window.seconds)),
        ENV_ITERS: str(int(window.iterations)),
        ENV_MAX_BYTES: str(int(window.max_bytes)),
    }
    if ignore_ports:
        out[ENV_IGNORE_PORTS] = ",".join(str(int(p)) for p in ignore_ports)
    return out
