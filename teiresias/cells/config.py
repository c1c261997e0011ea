"""Load and validate the cells configuration (etc/cells.example.yaml).

Three sections (HiveD's ``physicalCluster`` / ``virtualClusters``):

- ``cell_types``: name -> {child, count, node}; a type without ``child`` is
  the GPU (leaf); ``node: true`` marks the type whose cells are Slurm nodes.
- ``physical_cells``: the top-level cells, each with its type and its Slurm
  node names in order (a list, or a hostlist such as ``gpu[01-04]``).
- ``virtual_clusters``: name -> {accounts, quota}; ``quota`` maps a cell type
  (``type`` or ``chain/type`` when the type is in several chains) to a count.

Every mistake is one ConfigError line naming the file and the key, and what
to do. The feasibility check is HiveD's safety precondition (§3.2): the
buddy allocator can honour every VC's quota at once only if, level by level
from the top, the cells left over after the quotas of higher levels split
into enough cells for the quotas of this level.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teiresias import yamlconf
from teiresias.cells.model import CellChain, CellLevel, CellType, TopCellSpec, Topology
from teiresias.domain import Cluster
from teiresias.domain import topology as network
from teiresias.errors import ConfigError

_TYPE_KEYS = {"child", "count", "node"}
_TOP_KEYS = {"type", "nodes", "name"}
_VC_KEYS = {"accounts", "quota"}
_ROOT_KEYS = {"cell_types", "physical_cells", "virtual_clusters"}


@dataclass(frozen=True, slots=True)
class QuotaItem:
    """``count`` cells of ``type_name`` (level ``level``) in chain ``chain``."""

    chain: str
    type_name: str
    level: CellLevel
    count: int


@dataclass(frozen=True)
class VCSpec:
    name: str
    accounts: tuple[str, ...]
    quota: tuple[QuotaItem, ...]


@dataclass(frozen=True)
class CellsConfig:
    """A validated configuration; ``topology()`` builds the physical cell forest."""

    source: str
    chains: Mapping[str, CellChain]
    tops: tuple[TopCellSpec, ...]
    vcs: tuple[VCSpec, ...]

    def topology(self) -> Topology:
        return Topology.build(dict(self.chains), list(self.tops))

    def switches(self) -> network.Topology:
        """The physical cells as the one topology description (teiresias/domain/topology.py):
        each top-level cell's nodes under one switch, named by the cell's ``name``, else
        ``<type><index>`` (in HiveD's cell hierarchy a top-level cell is a rack or a switch's machines)."""
        return network.Topology(tuple((t.name or f"{t.type_name}{i}", t.nodes) for i, t in enumerate(self.tops)))

    def vc_of_account(self, account: str) -> str | None:
        for vc in self.vcs:
            if account in vc.accounts:
                return vc.name
        return None

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n for t in self.tops for n in t.nodes)

    def quota_gpus(self, vc: VCSpec) -> int:
        return sum(q.count * self.chains[q.chain].type_at(q.level).gpus for q in vc.quota)


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist with one bracket group: ``gpu[01-03,07]`` -> gpu01..gpu03, gpu07."""
    m = re.fullmatch(r"([^\[\],]*)\[([0-9,\-]+)\]([^\[\],]*)", expr)
    if m is None:
        if "[" in expr or "]" in expr:
            raise ValueError(expr)
        return [x for x in expr.split(",") if x]
    prefix, body, suffix = m.groups()
    out: list[str] = []
    for part in body.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            if not lo or not hi or int(hi) < int(lo):
                raise ValueError(expr)
            width = len(lo)
            out.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi) + 1))
        elif part:
            out.append(f"{prefix}{part}{suffix}")
        else:
            raise ValueError(expr)
    return out


def load(path: str | Path, cluster: Cluster | None = None) -> CellsConfig:
    """Read and validate a cells YAML file; with ``cluster``, also check node names and GPUs."""
    p = Path(path)
    raw = yamlconf.load_yaml(p, "cells config", hint="; pass --config FILE (see etc/cells.example.yaml)")
    return parse(raw, str(p), cluster)


def parse(raw: Any, source: str = "<cells>", cluster: Cluster | None = None) -> CellsConfig:
    """Validate an already-parsed mapping (``load`` minus the file reading)."""

    def err(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {key}: {msg}")

    if not isinstance(raw, dict):
        raise err("(top)", "expected a mapping with cell_types, physical_cells, virtual_clusters")
    _check_keys(raw, source)
    types_raw = raw.get("cell_types")
    if not isinstance(types_raw, dict) or not types_raw:
        raise err("cell_types", "must map each cell type name to {child, count, node}")

    chains = _parse_chains(types_raw, raw.get("physical_cells"), err)
    tops = _parse_tops(raw.get("physical_cells"), chains, cluster, err)
    vcs = _parse_vcs(raw.get("virtual_clusters") or {}, chains, err)
    _check_feasible(chains, tops, vcs, err)
    return CellsConfig(source=source, chains=chains, tops=tuple(tops), vcs=tuple(vcs))


def _check_keys(raw: dict, source: str) -> None:
    """Unknown keys anywhere, in the one format of teiresias/yamlconf.py (shapes are checked later)."""
    yamlconf.check_keys(source, raw, _ROOT_KEYS)
    for section, valid in (("cell_types", _TYPE_KEYS), ("virtual_clusters", _VC_KEYS)):
        entries = raw.get(section)
        if isinstance(entries, dict):
            for name, spec in entries.items():
                if isinstance(spec, dict):
                    yamlconf.check_keys(source, spec, valid, f"{section}.{name}")
    if isinstance(raw.get("physical_cells"), list):
        for i, t in enumerate(raw["physical_cells"]):
            if isinstance(t, dict):
                yamlconf.check_keys(source, t, _TOP_KEYS, f"physical_cells[{i}]")


def _parse_chains(types_raw: dict, tops_raw: Any, err) -> dict[str, CellChain]:
    """Each type used by a physical top cell roots a chain; walk its children to the leaf."""
    for name, spec in types_raw.items():
        key = f"cell_types.{name}"
        if spec is None:
            spec = types_raw[name] = {}
        if not isinstance(spec, dict):
            raise err(key, "must be a mapping {child, count, node} ({} for the GPU type)")
        child = spec.get("child")
        if child is not None:
            if child not in types_raw:
                raise err(f"{key}.child", f"unknown cell type {child!r}; define it under cell_types")
            count = spec.get("count")
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise err(f"{key}.count", f"must be a positive integer (how many {child} cells make one {name})")
        elif spec.get("count", 1) != 1:
            raise err(f"{key}.count", "a type without child is one GPU; remove count or add child")
        if "node" in spec and not isinstance(spec["node"], bool):
            raise err(f"{key}.node", "must be true or false")

    top_names: list[str] = []
    if isinstance(tops_raw, list):
        for t in tops_raw:
            if isinstance(t, dict) and isinstance(t.get("type"), str) and t["type"] in types_raw:
                if t["type"] not in top_names:
                    top_names.append(t["type"])
    chains: dict[str, CellChain] = {}
    for top in top_names:
        path: list[str] = []
        cur: str | None = top
        while cur is not None:
            if cur in path:
                cyc = " -> ".join(path + [cur])
                raise err(f"cell_types.{cur}.child", f"cycle in cell types ({cyc}); a chain must end at a GPU type")
            path.append(cur)
            cur = types_raw[cur].get("child")
        path.reverse()  # leaf first
        types: list[CellType] = []
        gpus = 1
        for i, n in enumerate(path):
            spec = types_raw[n]
            if i > 0:
                gpus *= spec["count"]
            types.append(
                CellType(
                    n,
                    CellLevel(i + 1),
                    spec.get("child"),
                    spec.get("count", 1) if i > 0 else 1,
                    gpus,
                    bool(spec.get("node", False)),
                )
            )
        node_types = [t.name for t in types if t.is_node]
        if len(node_types) != 1:
            what = "no type" if not node_types else f"{len(node_types)} types ({', '.join(node_types)})"
            raise err(
                f"cell_types.{top}",
                f"chain {' -> '.join(path)} has {what} marked node: true;"
                " mark exactly the type whose cells are Slurm nodes",
            )
        chains[top] = CellChain(tuple(types))
    return chains


def _parse_tops(tops_raw: Any, chains: dict[str, CellChain], cluster: Cluster | None, err) -> list[TopCellSpec]:
    if not isinstance(tops_raw, list) or not tops_raw:
        raise err("physical_cells", "must list the top-level cells, e.g. [{type: node, nodes: [gpu01]}]")
    seen: dict[str, str] = {}
    tops: list[TopCellSpec] = []
    for i, t in enumerate(tops_raw):
        key = f"physical_cells[{i}]"
        if not isinstance(t, dict):
            raise err(key, "must be a mapping {type, nodes}")
        tname = t.get("type")
        if tname not in chains:
            raise err(f"{key}.type", f"unknown cell type {tname!r}; define it under cell_types")
        chain = chains[tname]
        nodes_raw = t.get("nodes")
        try:
            if isinstance(nodes_raw, str):
                nodes = expand_hostlist(nodes_raw)
            elif isinstance(nodes_raw, list) and all(isinstance(n, str) for n in nodes_raw):
                nodes = [n for expr in nodes_raw for n in expand_hostlist(expr)]
            else:
                raise err(f"{key}.nodes", "must be a list of Slurm node names or a hostlist like gpu[01-04]")
        except ValueError as exc:
            raise err(f"{key}.nodes", f"bad hostlist {exc}; write e.g. gpu[01-04,07]") from None
        want = chain.top.gpus // chain.node_gpus
        if len(nodes) != want:
            raise err(
                f"{key}.nodes",
                f"a {tname} cell holds {want} node(s) of type "
                f"{chain.type_at(chain.node_level).name} but {len(nodes)} are listed; "
                "fix the node list or the child counts",
            )
        for n in nodes:
            if n in seen:
                raise err(f"{key}.nodes", f"node {n} is already in {seen[n]}; each node belongs to one cell")
            seen[n] = key
            if cluster is not None:
                if n not in cluster:
                    raise err(
                        f"{key}.nodes",
                        f"unknown node {n}: not in the Slurm cluster; "
                        f"known nodes: {', '.join(x.name for x in cluster.nodes)}",
                    )
                if cluster.node(n).gpus != chain.node_gpus:
                    raise err(
                        f"{key}.nodes",
                        f"node {n} has {cluster.node(n).gpus} GPUs in Slurm but a "
                        f"{chain.type_at(chain.node_level).name} cell holds {chain.node_gpus}; "
                        "fix the child counts",
                    )
        name = t.get("name")
        if name is not None and not isinstance(name, str):
            raise err(f"{key}.name", "must be a string")
        tops.append(TopCellSpec(tname, tuple(nodes), name))
    return tops


def _resolve_type(ref: str, chains: dict[str, CellChain], key: str, err) -> tuple[str, CellLevel]:
    if "/" in ref:
        chain_name, tname = ref.split("/", 1)
        if chain_name not in chains:
            raise err(key, f"unknown chain {chain_name!r}; chains are: {', '.join(chains)}")
        lev = chains[chain_name].level_of(tname)
        if lev is None:
            raise err(key, f"cell type {tname!r} is not in chain {chain_name}")
        return chain_name, lev
    hits = [(c, lev) for c, ch in chains.items() if (lev := ch.level_of(ref)) is not None]
    if not hits:
        raise err(
            key,
            f"unknown cell type {ref!r}; known: "
            f"{', '.join(sorted({t.name for ch in chains.values() for t in ch.types}))}",
        )
    if len(hits) > 1:
        raise err(
            key, f"cell type {ref!r} is in several chains; write one of: {', '.join(f'{c}/{ref}' for c, _ in hits)}"
        )
    return hits[0]


def _parse_vcs(vcs_raw: Any, chains: dict[str, CellChain], err) -> list[VCSpec]:
    if not isinstance(vcs_raw, dict):
        raise err("virtual_clusters", "must map each VC name to {accounts, quota}")
    owner: dict[str, str] = {}
    vcs: list[VCSpec] = []
    for name, spec in vcs_raw.items():
        key = f"virtual_clusters.{name}"
        if not isinstance(spec, dict):
            raise err(key, "must be a mapping {accounts, quota}")
        accounts = spec.get("accounts", [name])
        if isinstance(accounts, str):
            accounts = [accounts]
        if not isinstance(accounts, list) or not all(isinstance(a, str) for a in accounts):
            raise err(f"{key}.accounts", "must be a list of Slurm account names")
        for a in accounts:
            if a in owner:
                raise err(f"{key}.accounts", f"account {a} is already in VC {owner[a]}; an account maps to one VC")
            owner[a] = str(name)
        quota_raw = spec.get("quota") or {}
        if not isinstance(quota_raw, dict):
            raise err(f"{key}.quota", "must map cell types to counts, e.g. {node: 2}")
        items: list[QuotaItem] = []
        for ref, count in quota_raw.items():
            qkey = f"{key}.quota.{ref}"
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise err(qkey, "must be a non-negative integer count of cells")
            chain, lev = _resolve_type(str(ref), chains, qkey, err)
            if count:
                items.append(QuotaItem(chain, chains[chain].type_at(lev).name, lev, count))
        items.sort(key=lambda q: (q.chain, -q.level))
        vcs.append(VCSpec(str(name), tuple(accounts), tuple(items)))
    return vcs


def _check_feasible(chains: dict[str, CellChain], tops: list[TopCellSpec], vcs: list[VCSpec], err) -> None:
    """HiveD's precondition: per chain, from the top, free cells at each level cover the quotas."""
    for cname, chain in chains.items():
        have = sum(1 for t in tops if t.type_name == cname)
        for level in range(chain.top.level, 0, -1):
            need = sum(q.count for vc in vcs for q in vc.quota if q.chain == cname and q.level == level)
            if need > have:
                who = ", ".join(
                    f"{vc.name}={q.count}" for vc in vcs for q in vc.quota if q.chain == cname and q.level == level
                )
                raise err(
                    "virtual_clusters",
                    f"quotas of {chain.type_at(level).name} cells in chain {cname} "
                    f"({who}) need {need} but only {have} can be honoured at once after the quotas of "
                    "larger cells; lower a quota or add physical cells",
                )
            if level > 1:
                have = (have - need) * chain.type_at(level).child_count
