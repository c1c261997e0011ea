"""Placement policies: where a job's GPUs go (Tiresias §3.3).

A placement answers one question for one job: given the free GPUs per node,
which nodes give it exactly ``num_gpus`` GPUs, or None when no such choice
exists now. Placements never look at other jobs and never mutate ``free``.

- ``consolidate``: the fewest nodes a job could ever need, all under one
  switch, or the job waits (§3.3; the constraint Microsoft's production
  cluster enforces, the reference simulator's ``yarn`` scheme).
- ``spread``: fragmentation-minimizing best fit: take GPUs from the nodes
  with the fewest free GPUs first, so whole nodes stay free for big
  consolidated jobs; the job may span any number of nodes and switches.
- ``profile``: Tiresias' profile-based placement (§3.3.2): consolidate only
  jobs whose skew S_J exceeds PACKLIMIT, spread the others. A job whose skew
  is not known yet is consolidated: an unprofiled job might be sensitive
  (VGG, AlexNet lose up to 1.67x unconsolidated, Table 6), and consolidation
  is the safe default until the profiler has measured it.

Every tie is broken by node order in the Cluster, so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping

from teiresias.domain import Allocation, Cluster, Job, Node, Placement


def _fewest_nodes(need: int, nodes: list[tuple[int, int, Node]]) -> list[tuple[Node, int]] | None:
    """Fewest nodes out of ``nodes`` = [(free, order, node)] holding ``need`` GPUs.

    Greedy by most free GPUs is optimal for the node count; the last node is
    then the best fit (fewest free GPUs that still cover the remainder) so
    bigger holes stay whole.
    """
    by_free = sorted(nodes, key=lambda t: (-t[0], t[1]))
    chosen: list[tuple[Node, int]] = []
    left = need
    for i, (f, _, node) in enumerate(by_free):
        if f <= 0:
            break
        if f >= left:
            # Best fit for the remainder among the nodes not yet taken.
            rest = [t for t in by_free[i:] if t[0] >= left]
            best = min(rest, key=lambda t: (t[0], t[1]))
            chosen.append((best[2], left))
            return chosen
        chosen.append((node, f))
        left -= f
    return None


class _Topology:
    """Per-cluster facts placements reuse every call (clusters are immutable)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.order = {n.name: i for i, n in enumerate(cluster.nodes)}
        self.names = [n.name for n in cluster.nodes]
        self.switches = tuple(cluster.switches().values())
        # Each switch's nodes as a range of cluster.nodes, when they are contiguous there (the
        # usual switch-major order): a placement reads their free GPUs as a slice.
        index = {n.name: i for i, n in enumerate(cluster.nodes)}
        ranges = [(index[ns[0].name], index[ns[-1].name] + 1) for ns in self.switches]
        contiguous = all(e - b == len(ns) and index[ns[0].name] == b for (b, e), ns in zip(ranges, self.switches))
        self.switch_ranges: tuple[tuple[int, int], ...] | None = tuple(ranges) if contiguous else None
        self.max_switch_gpus = max((sum(n.gpus for n in ns) for ns in self.switches), default=0)
        self._switch_sizes = [sorted((n.gpus for n in ns), reverse=True) for ns in self.switches]
        self._all_sizes = sorted((n.gpus for n in cluster.nodes), reverse=True)
        self._min_nodes: dict[int, int] = {}

    def min_nodes(self, need: int) -> int:
        """Fewest nodes that could ever hold ``need`` GPUs: the consolidation target.

        Inside one switch when some switch is big enough (the best switch when
        the cluster is idle), else across the whole cluster.
        """
        got = self._min_nodes.get(need)
        if got is None:
            if need <= self.max_switch_gpus:
                got = min(_count_to_cover(need, sizes) for sizes in self._switch_sizes)
            else:
                got = _count_to_cover(need, self._all_sizes)
            self._min_nodes[need] = got
        return got


def _count_to_cover(need: int, sizes_desc: list[int]) -> int:
    total = 0
    for k, g in enumerate(sizes_desc, start=1):
        total += g
        if total >= need:
            return k
    return 1 << 30  # cannot hold it at all


class _TopologyCache:
    def __init__(self) -> None:
        self._topo: _Topology | None = None

    def topology(self, cluster: Cluster) -> _Topology:
        # Identity check, not equality: hashing 2,048 nodes each call would cost more
        # than the placement itself.
        if self._topo is None or self._topo.cluster is not cluster:
            self._topo = _Topology(cluster)
        return self._topo


class _ByGpuCount(_TopologyCache):
    """A placement where only a job's GPU count decides where it fits."""

    # Feasibility is monotone in the free GPUs: a job placeable on some free map is
    # placeable on any map with at least as many free GPUs on every node (the
    # simulator relies on it to skip provably unchanged rounds).
    monotone = True

    def job_key(self, job: Job) -> object:
        """What of a job decides where it fits (lets callers memoize failures)."""
        if job.nodes_allowed is None and not job.nodes_required and not job.gpus_per_node:
            return job.num_gpus
        return (job.num_gpus, job.nodes_allowed, job.nodes_required, job.gpus_per_node)

    def place(self, job: Job, free: Mapping[str, int], cluster: Cluster) -> Placement | None:
        need = job.num_gpus
        if need <= 0:
            return None
        if job.gpus_per_node:
            return _place_per_node(job, free, self.topology(cluster))
        if job.nodes_allowed is None and not job.nodes_required:
            return self._place(need, free, self.topology(cluster), cluster)
        return self._place_constrained(job, free, cluster)

    def _place_constrained(self, job: Job, free: Mapping[str, int], cluster: Cluster) -> Placement | None:
        """The same choice on the nodes the owner allows (the others count as full);
        if it leaves out a required node (Slurm's ``-w``: the job gets every listed
        node, and others as needed), the required nodes first, each with at least one
        GPU, the rest on the fewest other allowed nodes (most free first)."""
        topo = self.topology(cluster)
        allowed, required = job.nodes_allowed, job.nodes_required
        masked = {n: (f if allowed is None or n in allowed else 0) for n, f in free.items()}
        got = self._place(job.num_gpus, masked, topo, cluster)
        if got is None or not required or required <= set(got.nodes):
            return got
        return _cover_required(job.num_gpus, masked, required, topo.order)

    def _place(self, need: int, free: Mapping[str, int], topo: _Topology, cluster: Cluster) -> Placement | None:
        raise NotImplementedError


class ConsolidatePlacement(_ByGpuCount):
    """Consolidated placement (Tiresias §3.3): the fewest nodes possible, in one switch.

    A strict constraint, as in the YARN-CS production cluster the paper starts
    from ("a job may be placed in the WAITQUEUE even if there are GPUs available
    across the cluster") and the reference simulator's ``yarn`` scheme: a job
    gets exactly as many nodes as it minimally needs (1 for a job that fits a
    node; ceil(GPUs / GPUs-per-node) on a uniform cluster), all under one
    switch, or it waits. Only a job bigger than any switch may cross switches,
    still on the fewest nodes. Among valid choices the tightest fit wins (the
    nodes with the fewest free GPUs left over), ties by node order.
    """

    name = "consolidate"

    def _place(self, need: int, free: Mapping[str, int], topo: _Topology, cluster: Cluster) -> Placement | None:
        k = topo.min_nodes(need)
        if k == 1:
            return _best_single_node(need, free, topo)
        groups = topo.switches if need <= topo.max_switch_gpus else (cluster.nodes,)
        ranges = topo.switch_ranges if need <= topo.max_switch_gpus else ((0, len(cluster.nodes)),)
        vals = _free_in_node_order(free, topo.names) if ranges is not None else None
        chosen: list[tuple[Node, int]] | None = None
        waste = 0
        for g, nodes in enumerate(groups):
            # Most placements tried under a backlog fail: when even the k nodes with the most
            # free GPUs fall short, _fewest_nodes would need more than k nodes; skip building its input.
            if vals is not None and ranges is not None:
                b, e = ranges[g]
                frees = vals[b:e]
            else:
                frees = [free.get(n.name, 0) for n in nodes]
            frees.sort(reverse=True)
            if sum(frees[:k]) < need:
                continue
            cand = [(free.get(n.name, 0), topo.order[n.name], n) for n in nodes]
            got = _fewest_nodes(need, cand)
            if got is None or len(got) != k:
                continue
            w = sum(free.get(n.name, 0) for n, _ in got) - need
            if chosen is None or w < waste:
                chosen, waste = got, w
        return None if chosen is None else _as_placement(chosen, topo.order)


class SpreadPlacement(_ByGpuCount):
    """Fragmentation-minimizing best fit: fill partly used nodes first.

    One node if any can hold the job (the tightest such node). Otherwise the
    job is not consolidated: it takes GPUs from the nodes with the fewest free
    GPUs (ties by node order) until it has ``num_gpus``, so fully free nodes
    stay whole for jobs that need consolidation. Places whenever enough GPUs
    are free anywhere.
    """

    name = "spread"

    def _place(self, need: int, free: Mapping[str, int], topo: _Topology, cluster: Cluster) -> Placement | None:
        order = topo.order
        # A single node that fits (the tightest) keeps the job whole at no cost
        # to fragmentation; only spread when no single node can hold it.
        single = _best_single_node(need, free, topo)
        if single is not None:
            return single
        cand = sorted(
            ((free.get(n.name, 0), i, n) for i, n in enumerate(cluster.nodes) if free.get(n.name, 0) > 0),
            key=lambda t: (t[0], t[1]),
        )
        chosen: list[tuple[Node, int]] = []
        left = need
        for f, _, node in cand:
            take = min(f, left)
            chosen.append((node, take))
            left -= take
            if left == 0:
                return _as_placement(chosen, order)
        return None


class ProfilePlacement:
    """Profile-based placement (Tiresias §3.3.2): consolidate iff skew > PACKLIMIT.

    Unknown skew (not profiled yet) is consolidated; see the module docstring.
    """

    name = "profile"
    # Feasibility is monotone in the free GPUs: a job placeable on some free map is
    # placeable on any map with at least as many free GPUs on every node (the
    # simulator relies on it to skip provably unchanged rounds).
    monotone = True

    def __init__(self, packlimit: float = 0.5) -> None:
        self.packlimit = packlimit
        self._consolidate = ConsolidatePlacement()
        self._spread = SpreadPlacement()

    def job_key(self, job: Job) -> tuple[object, ...]:
        if job.nodes_allowed is None and not job.nodes_required and not job.gpus_per_node:
            return (job.num_gpus, self.wants_consolidation(job))
        return (
            job.num_gpus,
            self.wants_consolidation(job),
            job.nodes_allowed,
            job.nodes_required,
            job.gpus_per_node,
        )

    def wants_consolidation(self, job: Job) -> bool:
        return job.skew is None or job.skew > self.packlimit

    def place(self, job: Job, free: Mapping[str, int], cluster: Cluster) -> Placement | None:
        inner = self._consolidate if self.wants_consolidation(job) else self._spread
        return inner.place(job, free, cluster)


def _cover_required(
    need: int, free: Mapping[str, int], required: frozenset[str], order: Mapping[str, int]
) -> Placement | None:
    """``need`` GPUs with at least one on every required node, the required nodes
    filled first (most free first), then the fewest other nodes; None when a
    required node has no free GPU or there are fewer GPUs than required nodes."""
    if need < len(required) or any(free.get(n, 0) <= 0 or n not in order for n in required):
        return None
    alloc = {n: 1 for n in required}
    left = need - len(required)
    for n in sorted(required, key=lambda n: (-free[n], order[n])):
        take = min(free[n] - 1, left)
        alloc[n] += take
        left -= take
    for n in sorted((n for n in free if n not in required and free[n] > 0), key=lambda n: (-free[n], order.get(n, 0))):
        if left == 0:
            break
        take = min(free[n], left)
        alloc[n] = take
        left -= take
    if left:
        return None
    return Placement.of(sorted(alloc.items(), key=lambda kv: order.get(kv[0], 0)))


def _place_per_node(job: Job, free: Mapping[str, int], topo: _Topology) -> Placement | None:
    """A job that asked per node (``Job.gpus_per_node``) in its own shape: its node count
    with exactly its per-node GPUs on each, its required nodes among them, allowed nodes
    only; the tightest fits first (the fewest free GPUs left over, as consolidation
    prefers), ties by node order. None when the free GPUs cannot give that shape: a
    plan must not preempt for a split Slurm would refuse (the controller starts the job
    in its own shape or not at all)."""
    per, allowed, required = job.gpus_per_node, job.nodes_allowed, job.nodes_required
    count = -(-job.num_gpus // per)
    fits = [n for n in topo.names if free.get(n, 0) >= per and (allowed is None or n in allowed)]
    if not required <= set(fits):
        return None
    rest = sorted((n for n in fits if n not in required), key=lambda n: (free[n] - per, topo.order[n]))
    chosen = [*sorted(required, key=topo.order.__getitem__), *rest][:count]
    if len(chosen) < count:
        return None
    return Placement.of(sorted(((n, per) for n in chosen), key=lambda a: topo.order[a[0]]))


def _best_single_node(need: int, free: Mapping[str, int], topo: _Topology) -> Placement | None:
    """The node with the fewest free GPUs that still holds ``need``, ties by node order.

    Written with list operations that run in C: placements are tried for
    every waiting job of every round, and most fail on the first ``max``.
    """
    if not free or max(free.values()) < need:
        return None  # (free's values in any order: no node holds that many)
    names = topo.names
    vals = _free_in_node_order(free, names)
    top = max(vals) if vals else 0
    if top < need:
        return None
    # The tightest fit: the smallest free count >= need that some node has (nodes hold a few
    # GPUs: scanning the counts upward costs a few C-speed list scans).
    if top - need <= 16:
        v = need
        while v not in vals:
            v += 1
    else:
        v = min(x for x in vals if x >= need)
    return Placement((Allocation(names[vals.index(v)], need),))


def _free_in_node_order(free: Mapping[str, int], names: list[str]) -> list[int]:
    # The walk's maps are dicts copied from one built in node order: then the
    # values are already in node order, and reading them is a C-speed copy.
    if type(free) is dict and len(free) == len(names) and list(free) == names:
        return list(free.values())
    return [free.get(n, 0) for n in names]


def _as_placement(chosen: list[tuple[Node, int]], order: Mapping[str, int]) -> Placement:
    # Allocations listed in node order so equal placements compare equal.
    chosen = sorted(chosen, key=lambda t: order[t[0].name])
    return Placement.of([(n.name, g) for n, g in chosen])
