"""Which network switch each node hangs off: the one topology description.

Tiresias' cluster spec groups machines under switches (§5.1, its public
simulator's ``cluster_spec.csv``), and profile placement keeps a skewed job's
GPUs close by (§3.3.2). Three files describe that grouping and all three are
read into this one type:

- the simulator's cluster file (``etc/cluster.yaml``: ``switches: [{name, nodes}]``,
  teiresias/clusterspec.py);
- the controller's ``topology.switches`` (``{switch: [nodes]}`` or the same list
  form, teiresias/config.py);
- the cells' physical cells (``etc/cells.example.yaml``: each top-level cell a
  group of nodes under one switch, ``CellsConfig.switches()``).

So the simulator, the controller and the cells agree on a node's switch when
they are given the same grouping, whatever file it came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from teiresias.domain.cluster import Cluster

# Nodes no switch lists share this one (a flat network).
DEFAULT_SWITCH = "default"


@dataclass(frozen=True)
class Topology:
    """Switches in their given order, each with its node names in order.

    A node under two switches is a ValueError naming it; a node under none
    is on ``DEFAULT_SWITCH``.
    """

    switches: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        names: set[str] = set()
        for switch, nodes in self.switches:
            if switch in names:
                raise ValueError(f"switch {switch} is listed twice")
            names.add(switch)
            for n in nodes:
                if n in seen and seen[n] == switch:
                    raise ValueError(f"duplicate node names: {n} twice under switch {switch}")
                if n in seen:
                    raise ValueError(f"node {n} is already under switch {seen[n]}")
                seen[n] = switch

    @classmethod
    def of(cls, switches: Mapping[str, Iterable[str]]) -> Topology:
        """``{switch: node names}`` in the mapping's order."""
        return cls(tuple((str(s), tuple(str(n) for n in nodes)) for s, nodes in switches.items()))

    @classmethod
    def of_cluster(cls, cluster: Cluster) -> Topology:
        """The grouping a cluster's nodes already carry."""
        return cls.of({s: (n.name for n in nodes) for s, nodes in cluster.switches().items()})

    def switch_of(self, node: str) -> str:
        for switch, nodes in self.switches:
            if node in nodes:
                return switch
        return DEFAULT_SWITCH

    def as_dict(self) -> dict[str, tuple[str, ...]]:
        return dict(self.switches)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for _, nodes in self.switches for n in nodes)
