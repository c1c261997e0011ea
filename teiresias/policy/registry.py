"""Build policies by name: the one entry point for simulator, controller and CLIs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from teiresias.errors import ConfigError
from teiresias.policy.base import PlacementPolicy, SchedulingPolicy

if TYPE_CHECKING:
    from teiresias.policy.gandiva.params import GandivaParams
    from teiresias.policy.gittins import ServiceDistribution
    from teiresias.policy.sjf_bsbf.model import SharingModel

POLICY_NAMES = (
    "fifo",
    "best-effort",
    "sjf",
    "srtf",
    "srsf",
    "las",
    "gittins",
    "themis",
    "sjf-bsbf",
    "sjf-ffs",
    "gandiva",
)
PLACEMENT_NAMES = ("consolidate", "spread", "profile")
# Oracles: they read Job.duration, which only the simulator knows. A live
# controller should refuse them at start-up rather than fail every round.
ORACLE_NAMES = ("srtf", "srsf")
# GPU-sharing policies (docs/sjf-bsbf.md): a started job may share a running job's GPUs
# (Plan.sharing), so their starts are not all on idle GPUs.
SHARING_NAMES = ("sjf-bsbf", "sjf-ffs")


@dataclass(frozen=True)
class PolicyParams:
    """Parameters of every policy; each policy reads the ones it needs.

    - ``queues``: MLFQ thresholds Q_i^hi in GPU-seconds, strictly increasing;
      K = len(queues) + 1 queues (Tiresias §3.2.3; paper default one 1 h threshold).
    - ``promote_knob``: PROMOTEKNOB; None disables promotion (= infinity).
    - ``distribution``: job GPU-time distribution, required by ``gittins``.
    - ``placement`` / ``packlimit``: placement policy and PACKLIMIT (§3.3.2).
    - ``continuous``: las/gittins with continuous priority (Fig. 7) instead of queues.
    - ``last_queue``: order of gittins' last queue, ``fifo`` (paper) or ``gittins``
      (index with Delta = infinity; None: the default, ``gittins``); las has no
      distribution and stays FIFO.
    - ``preempt_cost``: seconds a preemption costs a job (checkpoint + restore); gittins
      swaps two jobs only when the index gain outweighs it for both (0: off).
    - ``queue_order``: las/gittins' order inside a queue (``policy.mlfq.QUEUE_ORDERS``):
      ``fifo`` by first start (the paper), ``running-first`` (running jobs keep their
      place), ``lifo-resume`` (and the job preempted last resumes first); None: the
      policy's default, ``fifo`` for las (paper-faithful by name), ``lifo-resume``
      for gittins (docs/policies.md, "Defaults").
    - ``time_limits``: gittins truncates its distribution at each job's declared time
      limit (``Job.time_limit``; jobs without one are unaffected).
    - ``lease``: themis GPU lease in seconds (Themis §3.3.2; default 10 min).
    - ``fairness_knob``: themis f in (0, 1): the 1 - f fraction of apps farthest
      from fair bid in each auction (Themis §3.3.2; default 0.8).
    - ``seed``: themis' random order of leftover GPUs (seeded with the round's time too).
    - ``gandiva``: gandiva's knobs (slice length, packing, migration, grow-shrink;
      None: GandivaParams' defaults, docs/gandiva.md).
    """

    queues: tuple[float, ...] = (3600.0,)
    promote_knob: float | None = None
    distribution: ServiceDistribution | None = None
    placement: str = "consolidate"
    packlimit: float = 0.5
    continuous: bool = False
    last_queue: str | None = None
    preempt_cost: float = 0.0
    queue_order: str | None = None
    time_limits: bool = True
    # sjf-bsbf / sjf-ffs: the interference and memory model (None: SharingModel's defaults).
    sharing: SharingModel | None = None
    lease: float = 600.0
    fairness_knob: float = 0.8
    seed: int = 0
    gandiva: GandivaParams | None = None

    def __post_init__(self) -> None:
        qs = tuple(float(q) for q in self.queues)
        if any(q <= 0 for q in qs) or any(b <= a for a, b in zip(qs, qs[1:])):
            raise ConfigError(
                f"queue thresholds {list(self.queues)} must be positive and strictly increasing"
                " GPU-seconds, e.g. --queues 3600,36000"
            )
        object.__setattr__(self, "queues", qs)
        if self.promote_knob is not None and self.promote_knob < 0:
            raise ConfigError(f"promote knob {self.promote_knob} must be >= 0 (omit it to disable promotion)")
        from teiresias.policy.mlfq import QUEUE_ORDERS

        if self.queue_order is not None and self.queue_order not in QUEUE_ORDERS:
            raise ConfigError(f"queue order {self.queue_order!r}: choose one of {', '.join(QUEUE_ORDERS)}")
        if self.last_queue is not None and self.last_queue not in ("fifo", "gittins"):
            raise ConfigError(f"last queue order {self.last_queue!r}: choose fifo (the paper's) or gittins")
        if not 0.0 <= self.packlimit:
            raise ConfigError(f"packlimit {self.packlimit} must be >= 0")
        if not (self.lease > 0 and self.lease < float("inf")):
            raise ConfigError(f"lease {self.lease} must be a positive number of seconds, e.g. --lease 600")
        if not 0.0 < self.fairness_knob < 1.0:
            raise ConfigError(f"fairness knob {self.fairness_knob} must be in (0, 1), e.g. --fairness-knob 0.8")


def build_placement(name: str, packlimit: float = 0.5) -> PlacementPolicy:
    """A placement policy by name (Tiresias §3.3); ConfigError listing valid names otherwise."""
    from teiresias.policy.placement import ConsolidatePlacement, ProfilePlacement, SpreadPlacement

    if name == "consolidate":
        return ConsolidatePlacement()
    if name == "spread":
        return SpreadPlacement()
    if name == "profile":
        return ProfilePlacement(packlimit)
    raise ConfigError(f"unknown placement {name!r}; choose one of: {', '.join(PLACEMENT_NAMES)}")


def build_policy(name: str, params: PolicyParams = PolicyParams()) -> SchedulingPolicy:
    """A scheduling policy by name; ConfigError listing valid names on an unknown one."""
    placement = build_placement(params.placement, params.packlimit)
    if name == "fifo":
        from teiresias.policy.fifo import FifoPolicy

        return FifoPolicy(placement)
    if name == "best-effort":
        from teiresias.policy.fifo import BestEffortPolicy

        return BestEffortPolicy(placement)
    if name == "sjf":
        from teiresias.policy.oracle import SjfPolicy

        return SjfPolicy(placement)
    if name == "srtf":
        from teiresias.policy.oracle import SrtfPolicy

        return SrtfPolicy(placement)
    if name == "srsf":
        from teiresias.policy.oracle import SrsfPolicy

        return SrsfPolicy(placement)
    if name == "las":
        from teiresias.policy.las import LasPolicy

        return LasPolicy(placement, params.queues, params.promote_knob, params.continuous, params.queue_order or "fifo")
    if name == "gittins":
        from teiresias.policy.gittins_policy import GittinsPolicy

        return GittinsPolicy(
            placement,
            params.distribution,
            params.queues,
            params.promote_knob,
            params.continuous,
            params.last_queue or "gittins",
            params.preempt_cost,
            queue_order=params.queue_order or "lifo-resume",
            time_limits=params.time_limits,
        )
    if name == "themis":
        from teiresias.policy.themis.policy import ThemisPolicy

        return ThemisPolicy(placement, params.lease, params.fairness_knob, params.queues, params.seed)
    if name in SHARING_NAMES:
        from teiresias.policy.sjf_bsbf.policy import SjfBsbfPolicy, SjfFfsPolicy

        cls = SjfBsbfPolicy if name == "sjf-bsbf" else SjfFfsPolicy
        return cls(placement, params.sharing, params.distribution)
    if name == "gandiva":
        from teiresias.policy.gandiva import GandivaPolicy

        return GandivaPolicy(placement, params.gandiva)
    raise ConfigError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}")
