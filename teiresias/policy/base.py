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
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence, runtime_checkable

from teiresias.domain import Cluster, Job, Placement, Plan, Snapshot


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
    their ``until``.
    """

    def rank_keys(self, jobs: Sequence[Job], now: float) -> list[tuple[tuple, float]]: ...


@runtime_checkable
class PlacementPolicy(Protocol):
    name: str

    def place(self, job: Job, free: Mapping[str, int], cluster: Cluster) -> Placement | None: ...
