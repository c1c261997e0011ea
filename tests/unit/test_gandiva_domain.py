"""The domain contract of Gandiva's decisions (docs/policy-contract.md rule 6)."""

from __future__ import annotations

from teiresias.domain import Colocation, JobId, Placement, Plan
from teiresias.policy.testing import cluster, running, snap


def test_each_gandiva_decision_makes_a_plan_non_empty() -> None:
    assert Plan().is_empty
    assert Plan(notes={JobId(1): "why"}).is_empty  # an explanation changes nothing
    one = (JobId(1),)
    pl = Placement.of({"s0n0": 1})
    for plan in (
        Plan(suspend=one),
        Plan(resume=one),
        Plan(pack=one),
        Plan(unpack=one),
        Plan(migrate={JobId(1): pl}),
        Plan(resize={JobId(1): pl}),
        Plan(start={JobId(2): pl}, colocate={JobId(2): Colocation((JobId(1),), "slice")}),
    ):
        assert not plan.is_empty, plan


def test_free_gpus_counts_a_colocated_group_once() -> None:
    # Two jobs time-slice GPU 1 of node s0n0, a third holds one more GPU: 2 of 4 are free.
    a = running(1, 1, {"s0n0": 1}, colocated_with=(JobId(2),))
    b = running(2, 1, {"s0n0": 1}, colocated_with=(JobId(1),), suspended=True)
    c = running(3, 1, {"s0n0": 1})
    assert snap(cluster(1, 4), a, b, c).free_gpus() == {"s0n0": 1 + 1}
    # A partner that already left the snapshot does not hide the survivor's GPUs.
    assert snap(cluster(1, 4), b, c).free_gpus() == {"s0n0": 2}
