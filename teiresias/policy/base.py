"""The one contract every scheduling and placement policy keeps.

A scheduling policy is an object built once from its parameters and then
called once per round::

    plan = policy.decide(snapshot)

- Pure: no clock (use ``snapshot.now``), no I/O, no randomness that is not
  seeded from its parameters, no mutation of the snapshot or its jobs.
- Total: every job in the snapshot appears in ``plan.order`` and ``plan.queues``;
  every RUNNING job is in exactly one of ``plan.keep`` / ``plan.preempt``; a
  started job gets a Placement with exactly ``num_gpus`` GPUs, all of them free
  after the plan's preemptions (all-or-nothing, Tiresias §3.1).
- The simulator and the live controller call the very same objects; they differ
  only in who builds the snapshot and who enacts the plan.

A placement policy answers one question: given the free GPUs per node, where
do this job's GPUs go (or None when it cannot be placed now).

Optional abilities are declared here as Protocols, and every owner (the
simulator, the live controller) asks for them through the functions below,
never by ``getattr`` of its own, so both read a policy the same way:

- ``IdleFirst`` / ``is_idle_first``: pending jobs meet the idle GPUs before
  any running job is preempted (``teiresias.policy.allocate``);
- ``MayPreempt`` / ``is_preemptive``: whether the policy ever preempts
  (declared False by non-preemptive policies; preemptive when undeclared);
- ``QuietAware`` / ``quiet_until_of``: until when the ranking cannot move;
- ``WakeAware`` / ``wake_at_of``: when a round is due with no event (Gandiva);
- ``MonotonePlacement`` / ``monotone_placement``: the placement's feasibility
  is monotone in the free GPUs;
- ``KeyRanked``: the ranking is a sort by a key of each job alone;
- ``WalksKept`` / ``walks_kept``: a KeyRanked policy decides a round from the
  waiting jobs and the running ones in a ranking the owner keeps between rounds;
- ``CarriesState``: the policy carries state from one round to the next in
  its Plan (``plan.carry``), such as HiveD's cell binding; the owner stores
  it and hands it back (``decide_round``).
- ``Leases`` / ``grants_leases``: the plans grant leases (``plan.leases``,
  Themis §4) that the owner keeps and puts back on the running jobs
  (``Job.lease_end``) next round;
- ``Slices`` / ``uses_slices``: the plans suspend, resume, colocate, pack,
  migrate or resize jobs (Gandiva §3), which the owner enacts with its own
  per-job mechanism state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from teiresias.domain import Cluster, Job, Placement, Plan, Snapshot

if TYPE_CHECKING:
    from teiresias.policy.kept import KeptRanking


@runtime_checkable
class SchedulingPolicy(Protocol):
    name: str

    def decide(self, snapshot: Snapshot) -> Plan: ...


@runtime_checkable
class KeyRanked(Protocol):
    """An optional ability: the policy's ranking is a sort by a key of each job alone.

    ``rank_keys(jobs, now)`` returns, for each job (in any order), a pair
    (key, until): the key is a tuple ending in the job's id such that
    ``decide`` walks the jobs in ascending key order
    (``teiresias.policy.allocate.walk``); it depends on its job and ``now``
    only, never on the other jobs, so the keys of any subset of a snapshot
    rank that subset as the whole snapshot ranks it. ``until``: the key stays
    the same up to that time as long as the job stays in its state (``now``:
    no promise; ``inf``: for ever). With ``idle_first`` this lets an owner
    leave out of a round the running jobs ranked above every pending job: the
    walk keeps them before any pending job's turn, so they matter only
    through the GPUs they hold (``teiresias.simulator.engine.Simulator._keyed_plan``).
    The policy keeps no state: an owner may keep the keys it was given until
    their ``until``. A job whose key holds for ever (``until`` inf) cannot move
    the ranking, so a ``QuietAware`` policy's ``quiet_until`` is the same with or
    without it in the snapshot: an owner may leave such jobs out of that call.
    """

    def rank_keys(self, jobs: Sequence[Job], now: float) -> list[tuple[tuple[Any, ...], float]]: ...


@runtime_checkable
class WalksKept(Protocol):
    """An optional ability of a ``KeyRanked`` policy that preempts and is ``idle_first``:
    ``decide_kept(snapshot, kept)`` decides what ``decide`` would for a snapshot holding
    ``snapshot.jobs`` (the waiting jobs only) and the running jobs ``kept`` holds (a
    ``teiresias.policy.kept.KeptRanking`` the owner keeps between rounds, in the order of
    the policy's ``rank_keys``, with their placements; ``snapshot.unavailable`` counts only
    GPUs outside them). The same starts, preemptions and promotions; ``order`` and ``queues``
    cover the waiting jobs, ``reasons`` the waiting and the preempted ones, ``keep`` is empty
    (every kept job not preempted keeps its GPUs). The walk then visits only the waiting jobs
    (``teiresias.policy.kept.walk_kept``), so a round costs what the waiting jobs and the
    evictions cost, not what the running ones do. ``decide_kept(snapshot, None)`` is
    ``decide(snapshot)``.
    """

    def decide_kept(self, snapshot: Snapshot, kept: KeptRanking | None) -> Plan: ...


@runtime_checkable
class PlacementPolicy(Protocol):
    name: str

    def place(self, job: Job, free: Mapping[str, int], cluster: Cluster) -> Placement | None: ...


@runtime_checkable
class IdleFirst(Protocol):
    """An optional ability: ``idle_first = True`` promises that pending jobs meet the
    idle GPUs before any running job is preempted for them (the walk of
    ``teiresias.policy.allocate``), so an owner may leave the running jobs out of a
    round in which the pending ones all fit on idle GPUs."""

    idle_first: bool


@runtime_checkable
class MayPreempt(Protocol):
    """``preemptive = False`` declares a policy that never preempts (fifo, sjf-bsbf)."""

    preemptive: bool


@runtime_checkable
class QuietAware(Protocol):
    """``quiet_until(snapshot)``: the policy's ranking of the snapshot's jobs cannot
    change before that time unless a job arrives, ends, starts or is preempted
    (a tick before it decides nothing new; Tiresias §3.2: queues move only at
    thresholds and promotions)."""

    def quiet_until(self, snapshot: Snapshot) -> float: ...


@runtime_checkable
class MonotonePlacement(Protocol):
    """A placement policy's ``monotone = True``: a job placeable on some free GPUs
    stays placeable when more GPUs are free (consolidate, spread, profile), so an
    owner may extend a round that planned nothing to newcomers on idle GPUs."""

    monotone: bool


@runtime_checkable
class WakeAware(Protocol):
    """``wake_at(snapshot)``: when a round could change something with no arrival
    or completion (Gandiva §3.1: a time slice ends, an idle period passes); inf:
    never. An owner that runs rounds only on events adds one there."""

    def wake_at(self, snapshot: Snapshot) -> float: ...


@runtime_checkable
class CarriesState(Protocol):
    """An optional ability: the policy carries state from one round to the next
    IN ITS PLAN, such as HiveD's virtual-to-physical cell binding (HiveD §3.2:
    a binding outlives the round that made it).

    ``decide_from(snapshot, carried)`` decides as ``decide`` would with
    ``carried``, the ``plan.carry`` of the previous round (None at the first
    round, or when the owner lost it: the policy then rebuilds what it can from
    the snapshot). The owner keeps ``plan.carry`` and hands it back next round;
    across processes it travels as JSON (``carry_to_json`` /
    ``carry_from_json``, which round-trip exactly, so that a policy fed the
    stored state decides as one fed the object). ``carry_key`` names it in a
    store. ``decide(snapshot)`` is ``decide_from(snapshot, None)``.
    """

    name: str
    carry_key: str

    def decide(self, snapshot: Snapshot) -> Plan: ...

    def decide_from(self, snapshot: Snapshot, carried: object | None) -> Plan: ...

    def carry_to_json(self, carry: object) -> Any: ...

    def carry_from_json(self, data: Any) -> object: ...


@runtime_checkable
class Leases(Protocol):
    """``leases = True``: the policy's plans grant leases (``plan.leases``: when each
    running job's GPUs go back to auction, Themis §4) and the policy reads them back
    from ``Job.lease_end`` next round. The policy stays pure: the owner keeps the
    leases between rounds (the simulator on its jobs, the controller in its store,
    with each job's app and measured work left) and expires them."""

    leases: bool


@runtime_checkable
class Slices(Protocol):
    """``slices = True``: the policy's plans use Gandiva's mechanisms (Gandiva §3:
    suspend/resume for time slices, colocate/pack/unpack, migrate, resize), and it
    reads back each job's slice state from the snapshot. The owner enacts them with
    per-job mechanism state of its own (the simulator's ``Mechanisms``, the
    controller's ``Slicer``), which a policy without the ability never needs."""

    slices: bool


def is_idle_first(policy: object) -> bool:
    """Whether ``policy`` declares ``idle_first = True`` (IdleFirst)."""
    return isinstance(policy, IdleFirst) and policy.idle_first is True


def is_preemptive(policy: object) -> bool:
    """False only for a policy that declares ``preemptive = False`` (MayPreempt)."""
    return not (isinstance(policy, MayPreempt) and policy.preemptive is False)


def quiet_until_of(policy: object) -> Callable[[Snapshot], float] | None:
    """The policy's ``quiet_until`` (QuietAware), or None when it declares none."""
    return policy.quiet_until if isinstance(policy, QuietAware) else None


def wake_at_of(policy: object) -> Callable[[Snapshot], float] | None:
    """The policy's ``wake_at`` (WakeAware), or None when it declares none."""
    return policy.wake_at if isinstance(policy, WakeAware) else None


def walks_kept(policy: object) -> bool:
    """Whether ``policy`` can decide over a ranking its owner keeps (WalksKept): it must rank
    by keys (KeyRanked), preempt, and meet idle GPUs first (IdleFirst). Continuous las and
    gittins (Fig. 7) are left out: every key moves every round, so keeping the ranking
    costs more than ranking afresh (measured: 2k jobs at load 4.5, 2.5 -> 3.1 s)."""
    return (
        isinstance(policy, WalksKept)
        and isinstance(policy, KeyRanked)
        and is_idle_first(policy)
        and is_preemptive(policy)
        and getattr(policy, "continuous", False) is not True
    )


def monotone_placement(policy: object) -> bool:
    """Whether the policy's placement declares ``monotone = True``: a job placeable
    on some free GPUs stays placeable when more GPUs are free."""
    placement = getattr(policy, "placement", None)  # a scheduling policy's own placement, if it has one
    return isinstance(placement, MonotonePlacement) and placement.monotone is True


def grants_leases(policy: object) -> bool:
    """Whether ``policy`` declares ``leases = True`` (Leases): the owner keeps its leases."""
    return isinstance(policy, Leases) and policy.leases is True


def uses_slices(policy: object) -> bool:
    """Whether ``policy`` declares ``slices = True`` (Slices): the owner runs its mechanisms."""
    return isinstance(policy, Slices) and policy.slices is True


def decide_round(policy: SchedulingPolicy, snapshot: Snapshot, carried: object | None) -> Plan:
    """One round the way every owner runs it: a CarriesState policy gets the state
    its previous plan carried, any other policy just decides."""
    if isinstance(policy, CarriesState):
        return policy.decide_from(snapshot, carried)
    return policy.decide(snapshot)
