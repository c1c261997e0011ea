"""A cells run in the simulator and live make the same decisions for the same snapshots.

HiveD's cell binding outlives a round (HiveD §3.2). The policy declares that it
carries it in its Plan (``CarriesState``, teiresias/policy/base.py); the
simulator hands the object back (``Simulator.decide``), the controller the
copy it stored as JSON (``loop.decide_stored`` through a real StateStore).
The snapshots are recorded from a real simulator run, then replayed through
the controller's step: every plan must be equal. The run is chosen so that
the carried binding changes decisions (a plan differs from one decided with
the binding rebuilt from scratch), so an owner that drops it cannot pass.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from slurm_plugin.controller.loop import decide_stored
from slurm_plugin.controller.state import StateStore
from teiresias.cells import config
from teiresias.cells.scheduler import CellPlan, CellsPolicy
from teiresias.cells.state import CellsState
from teiresias.domain import Cluster, Job, Snapshot
from teiresias.policy.base import CarriesState, decide_round
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, Simulator, TraceJob

EXAMPLE = Path(__file__).resolve().parents[2] / "etc" / "cells.example.yaml"
NODES = ["node1", "node2", "node3", "node4"]
CLUSTER = Cluster.from_tiresias_spec(2, 2, 4, node_names=NODES)
CFG = config.load(EXAMPLE, cluster=CLUSTER)
ACCOUNTS = ["team-a", "team-b", "team-b-students", "guest"]
JOB_FIELDS = [f.name for f in dataclasses.fields(Job)]


def frozen(snapshot: Snapshot) -> Snapshot:
    """The snapshot as the policy saw it: the simulator's jobs compute their counters
    from the engine's clock when read, so they are copied into plain Jobs now."""
    jobs = [Job(**{f: getattr(j, f) for f in JOB_FIELDS}) for j in snapshot.jobs]
    return Snapshot(snapshot.now, snapshot.cluster, jobs, dict(snapshot.unavailable))


class Recording(CellsPolicy):
    """The cells policy, recording each round's snapshot and what it was handed."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.rounds: list[tuple[Snapshot, CellsState | None, CellPlan]] = []

    def decide_cells(self, snapshot: Snapshot, state: CellsState | None) -> CellPlan:
        plan = super().decide_cells(snapshot, state)
        self.rounds.append((frozen(snapshot), state, plan))
        return plan


def policy(cls: type[CellsPolicy] = CellsPolicy) -> CellsPolicy:
    return cls(CFG, build_policy("las", PolicyParams(queues=(2000.0,))), with_report=False)


def trace(seed: int, n: int = 60) -> list[TraceJob]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 120)
        out.append(
            TraceJob(
                i + 1, rng.choice([1, 1, 2, 4, 4, 8]), round(t, 1), rng.uniform(200, 3000), account=rng.choice(ACCOUNTS)
            )
        )
    return out


def test_the_cells_policy_declares_that_it_carries_its_binding_in_the_plan() -> None:
    p = policy()
    assert isinstance(p, CarriesState)
    plan = p.decide(Snapshot(0.0, CLUSTER, []))
    assert isinstance(plan.carry, CellsState) and plan.carry == plan.cells
    # Non-stateful policies do not claim it, and decide_round just calls decide for them.
    las = build_policy("las", PolicyParams(queues=(2000.0,)))
    assert not isinstance(las, CarriesState)
    assert decide_round(las, Snapshot(0.0, CLUSTER, []), "ignored").carry is None


def test_simulated_and_live_cells_rounds_make_the_same_plans_for_the_same_snapshots(tmp_path: Path) -> None:
    sim_policy = policy(Recording)
    Simulator(trace(3), CLUSTER, sim_policy, SimulationOptions(interval=60.0, progress=False)).run()
    rounds = sim_policy.rounds
    assert len(rounds) > 50
    # The simulator handed each round the binding its previous round carried.
    assert all(state is prev[2].carry for prev, (_, state, _) in zip(rounds, rounds[1:]))

    live = policy()
    store = StateStore(tmp_path / "state.db")
    mattered = 0
    for i, (snap, _, sim_plan) in enumerate(rounds):
        plan, stored = decide_stored(live, snap, store.get_meta(live.carry_key))
        store.set_meta(live.carry_key, stored)
        assert plan == sim_plan, f"round {i} at t={snap.now}: live and simulated cells decided differently"
        if live.decide(snap) != sim_plan:
            mattered += 1
    store.close()
    # The carried binding changed decisions: dropping it (rebuilding each round) would differ.
    assert mattered > 0
