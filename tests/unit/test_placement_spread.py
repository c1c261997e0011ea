"""Fragmentation-minimizing placement: fill partly used nodes first."""

from teiresias.policy.placement import SpreadPlacement
from teiresias.policy.testing import cluster, pending

P = SpreadPlacement()


def place(job_gpus: int, free: dict, c):
    got = P.place(pending(1, job_gpus), free, c)
    return None if got is None else {a.node: a.gpus for a in got.allocations}


def test_a_job_that_fits_somewhere_takes_the_tightest_node() -> None:
    c = cluster(3, 8)
    assert place(2, {"s0n0": 8, "s0n1": 5, "s0n2": 2}, c) == {"s0n2": 2}


def test_a_job_spans_the_fullest_nodes_keeping_whole_nodes_free() -> None:
    c = cluster(4, 4)
    free = {"s0n0": 4, "s0n1": 1, "s0n2": 2, "s0n3": 4}
    # 5 GPUs: 1 + 2 from the fragments, then 2 from the first whole node.
    assert place(5, free, c) == {"s0n0": 2, "s0n1": 1, "s0n2": 2}


def test_spread_places_whenever_enough_gpus_are_free() -> None:
    c = cluster(4, 4, switches=2)
    free = {n.name: 1 for n in c.nodes}
    assert sum(place(8, free, c).values()) == 8
    assert place(9, free, c) is None
