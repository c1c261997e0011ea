"""Cluster topology: switches -> nodes -> GPUs (Tiresias' cluster spec)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    switch: str
    gpus: int
    cpus: int = 0
    mem_gb: float = 0.0


@dataclass(frozen=True)
class Cluster:
    """An ordered, immutable set of nodes grouped by switch.

    Node order is meaningful: placements break ties by it, so simulations are
    deterministic.
    """

    nodes: tuple[Node, ...]
    _by_name: dict[str, Node] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {n.name: n for n in self.nodes}
        if len(by_name) != len(self.nodes):
            raise ValueError("cluster has duplicate node names")
        object.__setattr__(self, "_by_name", by_name)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def max_gpus_per_node(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)

    def node(self, name: str) -> Node:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def switches(self) -> dict[str, tuple[Node, ...]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            out.setdefault(n.switch, []).append(n)
        return {s: tuple(ns) for s, ns in out.items()}

    @classmethod
    def from_tiresias_spec(
        cls,
        num_switch: int,
        num_node_p_switch: int,
        num_gpu_p_node: int,
        num_cpu_p_node: int = 0,
        mem_p_node: float = 0.0,
        node_names: list[str] | None = None,
    ) -> Cluster:
        """Build the uniform cluster of Tiresias' ``cluster_spec.csv``.

        Nodes are named ``s{switch}n{node}`` unless ``node_names`` (e.g. the
        Slurm node names, in switch-major order) is given.
        """
        total = num_switch * num_node_p_switch
        if node_names is not None and len(node_names) != total:
            raise ValueError(f"{len(node_names)} node names for {total} nodes")
        nodes = []
        for s in range(num_switch):
            for i in range(num_node_p_switch):
                k = s * num_node_p_switch + i
                name = node_names[k] if node_names else f"s{s}n{i}"
                nodes.append(Node(name, f"s{s}", num_gpu_p_node, num_cpu_p_node, mem_p_node))
        return cls(tuple(nodes))
