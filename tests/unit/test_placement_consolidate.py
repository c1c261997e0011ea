"""Consolidated placement (Tiresias §3.3): fewest nodes, one switch, or wait."""

from teiresias.domain import Cluster, Node
from teiresias.policy.placement import ConsolidatePlacement
from teiresias.policy.testing import cluster, pending

P = ConsolidatePlacement()


def place(job_gpus: int, free: dict, c: Cluster):
    got = P.place(pending(1, job_gpus), free, c)
    return None if got is None else {a.node: a.gpus for a in got.allocations}


def test_a_job_that_fits_a_node_goes_on_one_node_best_fit() -> None:
    c = cluster(3, 8)
    # s0n1 has exactly 3 free: tightest fit wins over emptier nodes.
    assert place(3, {"s0n0": 8, "s0n1": 3, "s0n2": 5}, c) == {"s0n1": 3}


def test_ties_go_to_the_first_node_in_cluster_order() -> None:
    c = cluster(3, 4)
    assert place(2, {"s0n0": 4, "s0n1": 4, "s0n2": 4}, c) == {"s0n0": 2}


def test_a_small_job_waits_rather_than_split_across_nodes() -> None:
    c = cluster(2, 4)
    assert place(4, {"s0n0": 2, "s0n1": 2}, c) is None


def test_a_big_job_takes_the_fewest_nodes_inside_one_switch() -> None:
    c = cluster(3, 4, switches=2)
    # Switch s0 could give 4+2+2 (3 nodes), switch s1 gives 4+4 (2 nodes = the minimum).
    free = {"s0n0": 4, "s0n1": 2, "s0n2": 2, "s1n0": 4, "s1n1": 1, "s1n2": 4}
    assert place(8, free, c) == {"s1n0": 4, "s1n2": 4}


def test_a_big_job_never_crosses_switches_when_one_switch_could_hold_it() -> None:
    c = cluster(2, 4, switches=2)
    free = {"s0n0": 4, "s0n1": 0, "s1n0": 4, "s1n1": 0}
    assert place(8, free, c) is None


def test_a_job_larger_than_any_switch_crosses_switches_on_the_fewest_nodes() -> None:
    c = cluster(2, 4, switches=2)
    free = {n.name: 4 for n in c.nodes}
    assert place(12, free, c) == {"s0n0": 4, "s0n1": 4, "s1n0": 4}


def test_heterogeneous_nodes_use_the_smallest_possible_node_count() -> None:
    c = Cluster((Node("a", "s", 8), Node("b", "s", 4), Node("c", "s", 4)))
    assert place(8, {"a": 8, "b": 4, "c": 4}, c) == {"a": 8}
    assert place(8, {"a": 6, "b": 4, "c": 4}, c) is None  # 1 node is possible, so 1 node it is


def test_more_gpus_than_free_is_none_and_free_map_is_untouched() -> None:
    c = cluster(1, 4)
    free = {"s0n0": 3}
    assert place(4, free, c) is None and free == {"s0n0": 3}


def test_target_node_count_is_what_some_single_switch_can_do() -> None:
    # The two 8-GPU nodes sit in different switches: a 16-GPU job cannot have 2
    # nodes in one switch, so its target is switch s0's 3 nodes (8+4+4).
    c = Cluster(
        (Node("a8", "s0", 8), Node("a4", "s0", 4), Node("b4", "s0", 4), Node("c8", "s1", 8), Node("c4", "s1", 4))
    )
    free = {n.name: n.gpus for n in c.nodes}
    assert place(16, free, c) == {"a8": 8, "a4": 4, "b4": 4}


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from teiresias.policy.registry import PLACEMENT_NAMES, build_placement  # noqa: E402


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 2, 4, 8])), min_size=1, max_size=8),
    data=st.data(),
)
def test_on_an_idle_cluster_every_job_that_fits_the_cluster_is_placed(sizes, data) -> None:
    """Otherwise a job could wait forever (the simulator would stall)."""
    c = Cluster(tuple(Node(f"n{i}", f"s{sw}", g) for i, (sw, g) in enumerate(sizes)))
    need = data.draw(st.integers(1, c.total_gpus))
    name = data.draw(st.sampled_from(PLACEMENT_NAMES))
    got = build_placement(name).place(pending(1, need), {n.name: n.gpus for n in c.nodes}, c)
    assert got is not None and got.num_gpus == need
