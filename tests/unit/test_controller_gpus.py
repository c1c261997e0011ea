"""Which GPU a shard job is released on (slurm_plugin/controller/gpus.py): the ledger of
GPU indices in use and the gres to set (docs/gandiva.md "Which GPU a shard job gets")."""

from __future__ import annotations

import pytest

from slurm_plugin.controller import gpus
from teiresias.domain import Placement
from tests.unit.round_support import held_job, shard_job


def test_a_stashed_shard_job_is_typed_with_the_gpus_of_its_start() -> None:
    sj = held_job(7, admin_comment="teiresias:held;teiresias:shard=2", shards=2)
    p = Placement.on({"node1": (2,)})
    assert gpus.shard_request(sj, p, typed=True) == "shard:g2:2"
    # A job joining an over-subscribed node: a shard of each GPU it may run on.
    assert gpus.shard_request(sj, p, typed=True, bind=(0, 1, 2, 3)) == "shard:g0:2,shard:g1:2,shard:g2:2,shard:g3:2"
    assert gpus.shard_request(sj, p, typed=False) == "shard:2"  # untyped nodes: as it asked
    typed_already = held_job(7, admin_comment="teiresias:held;teiresias:shard=2", shards=2, shard_gpus=(2,))
    assert gpus.shard_request(typed_already, p, typed=True) is None  # Slurm keeps a type once set
    assert gpus.shard_request(held_job(8), p, typed=True) is None  # not a shard job
    with pytest.raises(ValueError, match="same GPU indices"):
        gpus.shard_request(sj, Placement.on({"node1": (0,), "node2": (1,)}), typed=True)


def test_the_lowest_idle_gpu_common_to_the_nodes() -> None:
    busy = {"node1": {0, 2}, "node2": {1}}
    got = gpus.lowest_idle(Placement.of({"node1": 1, "node2": 1}), {"node1": 4, "node2": 4}, busy)
    assert got is not None and [a.gpu_ids for a in got.allocations] == [(3,), (3,)]
    assert gpus.lowest_idle(Placement.of({"node1": 1}), {"node1": 4}, busy) == Placement.on({"node1": (1,)})
    assert gpus.lowest_idle(Placement.of({"node1": 1}), {"node1": 2}, {"node1": {0, 1}}) is None


def test_the_ledger_counts_running_jobs_by_idx_and_starting_ones_by_plan() -> None:
    from slurm_plugin.controller.state import JobRecord, Phase

    slurm = {
        1: shard_job(1, "RUNNING", ["node1"], gpu_ids=(("node1", (0,)),), shard_gpus=(0,)),
        2: shard_job(2, "SUSPENDED", ["node1"], gpu_ids=(("node1", (1,)),), shard_gpus=(1,)),
        3: shard_job(3, "RUNNING", ["node1"], gpu_ids=(("node1", (0, 1, 2, 3)),), shard_gpus=(0, 1, 2, 3)),  # a floater
        4: shard_job(4, "PENDING"),
    }
    rec = JobRecord(job_id=4, user="u", account="", partition="gpu", name="j", comment="", gpus=1, submit_time=0.0)
    rec.phase, rec.planned = Phase.STARTING, Placement.on({"node2": (3,)})
    assert gpus.busy_gpus({4: rec}, slurm) == {"node1": {0, 1}, "node2": {3}}
    assert gpus.busy_gpus({4: rec}, slurm, floaters=True)["node1"] == {0, 1, 2, 3}


def test_a_starting_jobs_planned_gpus_survive_a_restart_of_the_controller(tmp_path) -> None:
    """The ledger counts a starting job's planned GPU indices: the state store keeps them
    (old rows, [node, gpus] without indices, still read)."""
    from slurm_plugin.controller.state import JobRecord, Phase, StateStore

    store = StateStore(tmp_path / "s.db")
    r = JobRecord(job_id=3, gpus=1, submit_time=1.0, phase=Phase.STARTING, planned=Placement.on({"node1": (2,)}))
    with store.transaction():
        store.save_job(r)
    store.close()
    got = StateStore(tmp_path / "s.db").job(3)
    assert got is not None and got.planned is not None and got.planned.ids_on("node1") == (2,)
    from slurm_plugin.controller.state import _placement_from_json

    old = _placement_from_json('[["node1", 2]]')
    assert old == Placement.of({"node1": 2}) and old is not None and old.ids_on("node1") == ()
