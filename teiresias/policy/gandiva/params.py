"""Gandiva's knobs, with the paper's values where it gives them."""

from __future__ import annotations

from dataclasses import dataclass

from teiresias.errors import ConfigError


@dataclass(frozen=True)
class GandivaParams:
    """Knobs of the Gandiva policy (docs/gandiva.md, "Policy").

    - ``slice``: seconds a time-sliced job runs before its partner's turn
      (§3.1: 1-minute slices keep suspend-resume under 2% overhead).
    - ``max_height``: at most this many jobs share one set of GPUs (§4.1's
      height); a job that would exceed it waits. Live, every member holds a
      shard while suspended, so a GPU needs at least this many shards
      (``teiresias cluster up --shards K``, docs/gandiva.md "slurm.conf lines").
    - ``packing``: pack light colocated groups (§4.2.2); ``pack_util``: the
      summed GPU utilisation (percent, NVML) up to which a group is packed.
    - ``migration``: move jobs to consolidate them and to lower the height when
      GPUs free up (§4.2.1-§4.2.2); ``defrag_threshold``: background
      defragmentation runs while some non-idle node has at least this many
      free GPUs (the paper: 3 of 4).
    - ``grow_shrink``: grow elastic jobs onto GPUs idle for ``idle_period``
      seconds, shrink them as soon as a waiting job needs the GPUs (§4.2.2).
    """

    slice: float = 60.0
    max_height: int = 4
    packing: bool = True
    pack_util: float = 100.0
    migration: bool = True
    defrag_threshold: int = 3
    grow_shrink: bool = True
    idle_period: float = 300.0

    def __post_init__(self) -> None:
        if not self.slice > 0:
            raise ConfigError(f"slice {self.slice} must be a positive number of seconds, e.g. --slice 60")
        if self.max_height < 1:
            raise ConfigError(f"max height {self.max_height} must be >= 1 (1: no time-slicing)")
        if not self.pack_util > 0:
            raise ConfigError(f"pack utilisation {self.pack_util} must be a positive percentage, e.g. 100")
        if self.defrag_threshold < 1:
            raise ConfigError(f"defragmentation threshold {self.defrag_threshold} must be >= 1 free GPU")
        if not self.idle_period >= 0:
            raise ConfigError(f"idle period {self.idle_period} must be >= 0 seconds")
