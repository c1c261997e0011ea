"""What a policy returns: decisions out, for the owner to enact."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from teiresias.domain.job import JobId
from teiresias.domain.placement import Placement


@dataclass(frozen=True)
class Sharing:
    """How a started job shares a running partner's GPUs, and why (Theorem 1's numbers).

    ``slowdown`` / ``partner_slowdown``: xi, the factor on each one's iteration
    time while both run; ``alone_slowdown``: the started job's iteration time
    at ``sub_batch`` relative to its full batch (it keeps the sub-batch after
    the partner ends). The averages are the pair's mean completion time in
    seconds from now, shared and one after the other.
    """

    partner: JobId
    sub_batch: int
    accumulation: int
    slowdown: float
    partner_slowdown: float
    alone_slowdown: float
    shared_avg_jct: float
    sequential_avg_jct: float
    # The queue check (sjf-bsbf, docs/sjf-bsbf.md §5): summed completion times (s from now) of the
    # pair and the jobs waiting, with the pair and without it; None where it did not run (sjf-ffs).
    queue_sum_jct: float | None = None
    queue_sum_jct_without: float | None = None


ColocationMode = Literal["slice", "pack"]


@dataclass(frozen=True)
class Colocation:
    """How a started job joins RUNNING jobs on their GPUs (Gandiva §3.1, §4.2).

    The started job's placement is exactly the GPUs ``partners`` hold (a group
    shares one set of GPUs: same nodes, same counts). ``mode``:

    - ``"slice"``: suspend-resume time-slicing, one member of the group runs at
      a time, round-robin per slice (the others are ``Job.suspended``);
    - ``"pack"``: every member runs at once (§4.2.2 packing).

    ``reason`` gives the numbers behind it (node height, affinity, GPU
    utilisation) for the audit log.
    """

    partners: tuple[JobId, ...]
    mode: ColocationMode = "slice"
    reason: str = ""
    # The GPU indices of its node the started job is bound to (a shard of each,
    # Job.bound_gpus): it runs on one of them at a time, its start placement's
    # ``gpu_ids`` say which first (server-wide time-slicing of 1-GPU jobs, Gandiva
    # §4.1 Figure 9). (): bound to its placement's GPUs, as its partners are.
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The decisions of one round.

    - ``start``: PENDING jobs to start now, each with the GPUs it gets.
    - ``preempt``: RUNNING jobs to stop (checkpoint and requeue); they become PENDING.
    - ``keep``: RUNNING jobs that go on where they are.
    - ``promote``: jobs whose t_J and delta_J the owner resets to 0 (starvation
      promotion, Tiresias §3.2.3); applied before the next round.
    - ``queues``: the MLFQ queue index (0 = Q1) of every job after this round.
    - ``order``: every job id in the order the policy ranks them (highest first);
      the controller turns it into Slurm priorities, ``teiresias queue`` shows it.
    - ``reasons``: for each job left waiting, why (shown as "why pending").
    - ``index``: the 2D-Gittins index of each job where the policy computed one.
    - ``leases``: for leasing policies (themis), when each job running after
      this round loses its GPUs unless it wins them again; the owner stores
      it in ``Job.lease_end`` before the next round (like ``promote``).
    - ``rho``: finish-time fairness of each job's app (themis), for display.
    - ``sharing``: for a started job that shares a kept job's GPUs (SJF-BSBF),
      the pair's settings; its placement is a subset of the partner's GPUs,
      which stay held by the partner (docs/sjf-bsbf.md).

    Gandiva's mechanisms (docs/gandiva.md; each listed job is also in ``keep``
    or ``start``, never in ``preempt``):

    - ``suspend``: RUNNING jobs paused in place; they keep their GPUs (§3.1
      suspend-resume time-slicing). ``resume``: suspended jobs that run again.
    - ``colocate``: a started job placed on GPUs RUNNING jobs hold (its
      ``start`` placement equals theirs), and how the group shares them.
    - ``pack`` / ``unpack``: RUNNING colocated jobs switched to all-run-at-once
      / back to time-slicing (§4.2.2); every member of the group is listed.
    - ``migrate``: a RUNNING job checkpointed and started again on these GPUs
      (same count). ``resize``: an elastic RUNNING job restarted on these GPUs
      at a new size (grow: its GPUs plus idle ones; shrink: a subset of its
      GPUs). Migration and grow targets are idle before the plan and taken by
      no start of it; GPUs a shrink or migration frees count for the next
      round, not this one (the owner frees them only once the checkpoint is done).
    - ``devices``: RUNNING jobs bound to several GPUs of their node (a time-sliced
      1-GPU job, ``Job.bound_gpus``) that run on these GPUs from now on, a switch
      at the next mini-batch boundary without a restart (Gandiva §4.1:
      "suspend-resume may also initiate a change of GPU within the same server");
      a resumed such job is listed with the GPU it resumes on.
    - ``notes``: why each of those decisions, with the numbers (audit log).

    - ``carry``: state a stateful policy carries to its next round (HiveD's cell
      binding; ``teiresias.policy.base.CarriesState``); the owner stores it and
      hands it back to ``decide_from``. None for every other policy.
    """

    start: Mapping[JobId, Placement] = field(default_factory=dict)
    preempt: tuple[JobId, ...] = ()
    keep: tuple[JobId, ...] = ()
    promote: tuple[JobId, ...] = ()
    queues: Mapping[JobId, int] = field(default_factory=dict)
    order: tuple[JobId, ...] = ()
    reasons: Mapping[JobId, str] = field(default_factory=dict)
    index: Mapping[JobId, float] = field(default_factory=dict)
    sharing: Mapping[JobId, Sharing] = field(default_factory=dict)
    leases: Mapping[JobId, float] = field(default_factory=dict)
    rho: Mapping[JobId, float] = field(default_factory=dict)
    suspend: tuple[JobId, ...] = ()
    resume: tuple[JobId, ...] = ()
    colocate: Mapping[JobId, Colocation] = field(default_factory=dict)
    pack: tuple[JobId, ...] = ()
    unpack: tuple[JobId, ...] = ()
    migrate: Mapping[JobId, Placement] = field(default_factory=dict)
    resize: Mapping[JobId, Placement] = field(default_factory=dict)
    devices: Mapping[JobId, Placement] = field(default_factory=dict)
    notes: Mapping[JobId, str] = field(default_factory=dict)
    carry: object = None

    @property
    def is_empty(self) -> bool:
        """True when the plan changes nothing (``notes`` alone change nothing)."""
        return not (
            self.start
            or self.preempt
            or self.promote
            or self.suspend
            or self.resume
            or self.pack
            or self.unpack
            or self.migrate
            or self.resize
            or self.devices
        )
