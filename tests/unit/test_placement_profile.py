"""Profile-based placement (Tiresias §3.3.2): consolidate only skewed jobs."""

from teiresias.policy.placement import ProfilePlacement
from teiresias.policy.testing import cluster, pending

# Two half-used nodes: only a split placement can hold a 4-GPU job.
C = cluster(2, 4)
FREE = {"s0n0": 2, "s0n1": 2}


def test_skewed_jobs_wait_for_consolidation() -> None:
    assert ProfilePlacement(0.5).place(pending(1, 4, skew=0.9), FREE, C) is None


def test_unskewed_jobs_are_spread() -> None:
    got = ProfilePlacement(0.5).place(pending(1, 4, skew=0.2), FREE, C)
    assert got is not None and got.num_nodes == 2


def test_skew_equal_to_packlimit_is_not_consolidated() -> None:
    # "consolidate only jobs with skew > PACKLIMIT"
    assert ProfilePlacement(0.5).place(pending(1, 4, skew=0.5), FREE, C) is not None


def test_unprofiled_jobs_are_consolidated_to_be_safe() -> None:
    assert ProfilePlacement(0.5).place(pending(1, 4, skew=None), FREE, C) is None
    assert ProfilePlacement(0.5).place(pending(1, 4, skew=None), {"s0n0": 4, "s0n1": 0}, C) is not None
