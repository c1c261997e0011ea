"""HiveD's safety property, property-based (issue 6, Must show).

For random cell hierarchies, feasible VC assignments and random sequences of
allocations and releases that stay inside each VC's quota (the VC's private
view can serve the request), every guaranteed request succeeds, possibly after
preempting opportunistic jobs, and releasing everything merges the cells back
to the original free state.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teiresias.cells import config
from teiresias.cells.buddy import BuddySpace
from teiresias.cells.model import Cell
from teiresias.cells.preempt import Occupancy, victims
from teiresias.cells.vc import VirtualCluster
from teiresias.domain import JobId


@st.composite
def hierarchies(draw):
    """A chain (child counts 1..3, 2..4 levels, node level anywhere), 1..3 top cells, 2..3 VCs."""
    levels = draw(st.integers(2, 4))
    counts = [draw(st.sampled_from([1, 2, 2, 3])) for _ in range(levels - 1)]
    node_level = draw(st.integers(1, levels))
    types: dict = {"l1": {}}
    for lv in range(2, levels + 1):
        types[f"l{lv}"] = {"child": f"l{lv - 1}", "count": counts[lv - 2]}
    types[f"l{node_level}"]["node"] = True
    nodes_per_top = 1
    for lv in range(node_level + 1, levels + 1):
        nodes_per_top *= counts[lv - 2]
    tops = draw(st.integers(1, 3))
    n_vcs = draw(st.integers(2, 3))
    # A feasible assignment by construction: each top cell is given whole to a VC,
    # left out, or split into its children, recursively.
    quota: list[dict[str, int]] = [{} for _ in range(n_vcs)]

    def assign(level: int) -> None:
        # Mostly split or assign: a cluster mostly left out tests little.
        choice = draw(st.sampled_from([0, 1, 1, 2, 2, 2] if level > 1 else [0, 1, 1, 1]))
        if choice == 0:
            return
        if choice == 1:
            q = quota[draw(st.integers(0, n_vcs - 1))]
            q[f"l{level}"] = q.get(f"l{level}", 0) + 1
            return
        for _ in range(counts[level - 2]):
            assign(level - 1)

    for _ in range(tops):
        assign(levels)
    raw = {
        "cell_types": types,
        "physical_cells": [
            {"type": f"l{levels}", "nodes": [f"t{t}n{i}" for i in range(nodes_per_top)]} for t in range(tops)
        ],
        "virtual_clusters": {f"vc{k}": {"accounts": [f"acct{k}"], "quota": quota[k]} for k in range(n_vcs)},
    }
    return raw, levels


def operations(levels: int):
    return st.lists(
        st.tuples(
            st.sampled_from(["alloc", "alloc", "alloc", "release", "opp"]),
            st.integers(0, 2),
            st.integers(1, levels),
            st.integers(0, 10_000),
        ),
        min_size=10,
        max_size=60,
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_guaranteed_requests_inside_quota_always_succeed_and_release_restores(data) -> None:
    raw, levels = data.draw(hierarchies())
    sequence = data.draw(operations(levels))
    cfg = config.parse(raw)
    topo = cfg.topology()
    chain = next(iter(cfg.chains))
    physical = BuddySpace(topo.roots)
    initial = physical.snapshot()
    vcs = [VirtualCluster(s, dict(cfg.chains), frozenset(), topo.node_cells) for s in cfg.vcs]
    occ = Occupancy()
    held: list[tuple[VirtualCluster, Cell, JobId]] = []  # guaranteed cells
    next_job = 1
    preemptions = 0

    for op, who, level, pick in sequence:
        level = min(level, levels)
        if op == "alloc":
            # Only requests the VC's private view can serve are guaranteed requests.
            fits = [(vc, lv) for vc in vcs for lv in range(1, levels + 1) if vc.can_fit(chain, lv)]
            if not fits:
                continue
            vc, level = fits[(pick + who) % len(fits)]
            cell = vc.alloc(chain, level, physical, occ.cost)
            assert cell is not None, f"safety broken: {vc.name} level {level} within quota failed"
            assert cell.level == level
            for v in victims(occ, [cell]):
                occ.vacate(v)
                preemptions += 1
            job = JobId(next_job)
            next_job += 1
            occ.occupy(job, [cell], opportunistic=False)  # raises if the GPUs were still held
            held.append((vc, cell, job))
        elif op == "release" and held:
            vc, cell, job = held.pop(pick % len(held))
            occ.vacate(job)
            vc.release(cell, physical)
        elif op == "opp":
            # An opportunistic job takes any idle GPU cell of this level (other view: bound or not).
            idle = [c for c in topo.cells if c.level == level and occ.used_gpus(c) == 0]
            if idle:
                occ.occupy(JobId(next_job), [idle[pick % len(idle)]], opportunistic=True)
                next_job += 1

    # Guaranteed cells of different VCs never overlap, and each lies inside a bound cell of its VC.
    for vc, cell, _ in held:
        root = vc.bound_root_of(cell)
        assert root is not None and root.bound is not None and root.bound.contains(cell)

    for vc, cell, job in held:
        occ.vacate(job)
        vc.release(cell, physical)
    assert physical.snapshot() == initial
    assert all(not vc.bound_cells() for vc in vcs)


def test_mixed_level_quotas_need_the_smallest_split() -> None:
    """The case splitting the largest free cell gets wrong: 8 GPUs, X = one 4-GPU cell, Y = 2 + 1."""
    raw = {
        "cell_types": {
            "l1": {},
            "l2": {"child": "l1", "count": 2},
            "l3": {"child": "l2", "count": 2},
            "l4": {"child": "l3", "count": 2, "node": True},
        },
        "physical_cells": [{"type": "l4", "nodes": ["n0"]}],
        "virtual_clusters": {"x": {"quota": {"l3": 1}}, "y": {"quota": {"l2": 1, "l1": 1}}},
    }
    cfg = config.parse(raw)
    topo = cfg.topology()
    physical = BuddySpace(topo.roots)
    x, y = (VirtualCluster(s, dict(cfg.chains), frozenset(), topo.node_cells) for s in cfg.vcs)
    assert y.alloc("l4", 2, physical, None) is not None
    assert y.alloc("l4", 1, physical, None) is not None  # binds Y's 1-GPU cell: must split the free 2-GPU cell
    got = x.alloc("l4", 3, physical, None)
    assert got is not None and got.gpus == 4
