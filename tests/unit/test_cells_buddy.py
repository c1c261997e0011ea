"""Split and merge of the buddy allocator on the slides' examples (HiveD lecture slides,
"Recap: Buddy Algorithm in Linux" and "Buddy Cell Allocation Algorithm")."""

from __future__ import annotations

from teiresias.cells import config
from teiresias.cells.buddy import BuddySpace
from teiresias.cells.model import Topology


def binary_topology(levels: int, node_level: int, tops: int = 1) -> Topology:
    """A chain of ``levels`` levels, each cell made of 2 buddies (1, 2, 4, ... GPUs)."""
    types: dict = {"l1": {}}
    for lv in range(2, levels + 1):
        types[f"l{lv}"] = {"child": f"l{lv - 1}", "count": 2}
    types[f"l{node_level}"]["node"] = True
    nodes_per_top = 2 ** (levels - node_level)
    raw = {
        "cell_types": types,
        "physical_cells": [
            {"type": f"l{levels}", "nodes": [f"n{t}-{i}" for i in range(nodes_per_top)]} for t in range(tops)
        ],
    }
    return config.parse(raw).topology()


def free_by_level(space: BuddySpace) -> dict[int, int]:
    return {lv: len(cells) for (_, lv), cells in space.snapshot().items()}


def test_slides_16kb_example_split_and_merge() -> None:
    # 16 "KB" as a 16-GPU cell of 1-GPU leaves: level 5 = 16, 4 = 8, 3 = 4, 2 = 2, 1 = 1.
    topo = binary_topology(levels=5, node_level=5)
    space = BuddySpace(topo.roots)
    assert free_by_level(space) == {5: 1}

    # Step 2: request 1KB -> 16 splits into 8+8, 4+4, 2+2, 1+1; one 1 is allocated.
    a = space.alloc("l5", 1)
    assert a is not None and a.level == 1
    assert free_by_level(space) == {4: 1, 3: 1, 2: 1, 1: 1}

    # Step 3: request 2KB -> the free 2KB block, no split.
    b = space.alloc("l5", 2)
    assert b is not None and b.level == 2
    assert free_by_level(space) == {4: 1, 3: 1, 1: 1}
    assert a.parent is not b and a.parent.parent is b.parent  # both inside the first 4KB block

    # Step 4: free 1KB -> merges with its free buddy into 2KB, whose buddy is used: stop.
    space.release(a)
    assert free_by_level(space) == {4: 1, 3: 1, 2: 1}

    # Freeing the 2KB block merges everything back into the 16KB block.
    space.release(b)
    assert free_by_level(space) == {5: 1}


def test_cell_request_for_one_gpu_splits_node_cell_down() -> None:
    # The slides' cell request for level-1 (GPU) in an 8-GPU node of 2-GPU switches, 4-GPU sockets.
    topo = binary_topology(levels=4, node_level=4, tops=2)
    space = BuddySpace(topo.roots)
    g = space.alloc("l4", 1)
    assert g is not None and g.level == 1
    # One node is split (socket + switch + GPU left free), the other node stays whole.
    assert free_by_level(space) == {4: 1, 3: 1, 2: 1, 1: 1}
    # The next GPU is the buddy of the first: the smallest free cell is used first.
    h = space.alloc("l4", 1)
    assert h is not None and h.parent is g.parent
    assert free_by_level(space) == {4: 1, 3: 1, 2: 1}


def test_take_and_release_are_exact_inverses() -> None:
    topo = binary_topology(levels=4, node_level=3, tops=1)  # 8-GPU rack of two 4-GPU nodes
    space = BuddySpace(topo.roots)
    before = space.snapshot()
    leaf = topo.by_address["n0-1/1/0"]
    assert space.take(leaf)
    assert not space.take(leaf)  # already used
    assert space.free_block_containing(topo.by_address["n0-0"]) is topo.by_address["n0-0"]
    space.release(leaf)
    assert space.snapshot() == before


def test_ceiling_stops_merging() -> None:
    topo = binary_topology(levels=4, node_level=4, tops=1)
    node = topo.roots[0]
    socket = node.children[1]
    space = BuddySpace([socket])  # a VC space whose only bound cell is one socket
    c = space.alloc("l4", 2)
    assert c is not None and socket.contains(c)
    space.release(c)
    assert space.snapshot() == {("l4", 3): (socket.address,)}
    assert space.alloc("l4", 4) is None  # nothing above the ceiling


def test_bad_node_is_skipped_but_its_healthy_buddies_are_split_for() -> None:
    topo = binary_topology(levels=4, node_level=2, tops=1)  # one 8-GPU rack of four 2-GPU nodes
    space = BuddySpace(topo.roots)
    space.set_bad_nodes(frozenset({"n0-0", "n0-1", "n0-2"}), topo.node_cells)
    got = space.alloc("l4", 2)
    assert got is not None and got.node == "n0-3"
    assert space.alloc("l4", 2) is None  # every other node is bad
    assert space.alloc("l4", 1) is None  # and so are their GPUs
    assert space.alloc("l4", 3) is None  # no healthy 4-GPU cell exists
