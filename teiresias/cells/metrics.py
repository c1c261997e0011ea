"""HiveD's fragmentation metric.

HiveD (evaluation, "level of fragmentation"): the proportion of 8-GPU nodes
that cannot provide 8-GPU affinity for a high-priority job. Here, a node
*is fragmented* when guaranteed (high-priority) jobs hold some but not all of
its GPUs: it has spare GPUs, yet cannot host a whole-node guaranteed job
without preempting one. A node entirely free of guaranteed jobs can provide the
affinity (opportunistic jobs there are preempted for it); a node entirely
used by guaranteed jobs is busy, not fragmented. Nodes that are DOWN/DRAIN
are left out of the denominator. For a plain-quota baseline every job inside
its tenant's quota is high-priority.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def fragmentation(capacity: Mapping[str, int], high_used: Mapping[str, int], exclude: Iterable[str] = ()) -> float:
    """Share of nodes with 0 < GPUs held by high-priority jobs < node GPUs (0.0 for no nodes)."""
    skip = set(exclude)
    nodes = [n for n in capacity if n not in skip and capacity[n] > 0]
    if not nodes:
        return 0.0
    frag = sum(1 for n in nodes if 0 < high_used.get(n, 0) < capacity[n])
    return frag / len(nodes)
