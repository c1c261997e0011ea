"""Read a cluster description into a :class:`teiresias.domain.Cluster`.

Two forms are accepted:

- Tiresias' ``cluster_spec.csv`` (the public simulator's format, read
  unchanged): a header ``num_switch,num_node_p_switch,num_gpu_p_node,
  num_cpu_p_node,mem_p_node`` and one row of integers. Nodes are named
  ``s{switch}n{node}``.
- YAML (``etc/cluster.yaml``): either the same five keys, or an explicit list
  of switches with their nodes, which is how the live controller maps Slurm
  node names onto switches::

      switches:
        - name: s0
          nodes: [node1, node2]        # plain names take gpus_per_node
        - name: s1
          nodes:
            - {name: node3, gpus: 8}
      gpus_per_node: 4

Every problem raises :class:`ConfigError` with one line naming the file and
what to fix.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import yaml

from teiresias.domain import Cluster, Node
from teiresias.errors import ConfigError

SPEC_COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
_REQUIRED = SPEC_COLUMNS[:3]


def load_cluster(path: str | Path) -> Cluster:
    """Load a Tiresias spec CSV or a YAML cluster file (chosen by extension)."""
    p = Path(path)
    if not p.exists() or p.is_dir():
        raise ConfigError(f"{p}: cluster spec not found; pass a .csv (Tiresias cluster_spec) or .yaml file")
    if p.suffix.lower() in (".yaml", ".yml"):
        return _load_yaml(p)
    return _load_csv(p)


def _int_field(p: Path, where: str, key: str, value: Any, minimum: int) -> int:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise ConfigError(f"{p}:{where}: {key} must be an integer, got {value!r}") from None
    if n < minimum:
        raise ConfigError(f"{p}:{where}: {key} must be >= {minimum}, got {n}")
    return n


def _from_counts(p: Path, where: str, row: dict[str, Any]) -> Cluster:
    missing = [k for k in _REQUIRED if row.get(k) in (None, "")]
    if missing:
        raise ConfigError(
            f"{p}:{where}: missing {', '.join(missing)}; a cluster spec needs {', '.join(SPEC_COLUMNS)}"
        )
    return Cluster.from_tiresias_spec(
        _int_field(p, where, "num_switch", row["num_switch"], 1),
        _int_field(p, where, "num_node_p_switch", row["num_node_p_switch"], 1),
        _int_field(p, where, "num_gpu_p_node", row["num_gpu_p_node"], 1),
        _int_field(p, where, "num_cpu_p_node", row.get("num_cpu_p_node") or 0, 0),
        float(_int_field(p, where, "mem_p_node", row.get("mem_p_node") or 0, 0)),
    )


def _load_csv(p: Path) -> Cluster:
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames:
            raise ConfigError(f"{p}:1: empty cluster spec; expected header {','.join(SPEC_COLUMNS)}")
        fields = [f.strip() for f in reader.fieldnames]
        missing = [k for k in _REQUIRED if k not in fields]
        if missing:
            raise ConfigError(
                f"{p}:1: missing column {', '.join(missing)}; expected header {','.join(SPEC_COLUMNS)}"
            )
        rows = [{(k or "").strip(): v for k, v in r.items()} for r in reader]
    if len(rows) != 1:
        raise ConfigError(f"{p}: expected exactly one data row after the header, found {len(rows)}")
    return _from_counts(p, "2", rows[0])


def _load_yaml(p: Path) -> Cluster:
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"{mark.line + 1}" if mark is not None else "?"
        raise ConfigError(f"{p}:{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{p}: expected a mapping with 'switches:' or num_switch/num_node_p_switch/num_gpu_p_node")
    if "cluster" in doc and isinstance(doc["cluster"], dict):
        doc = doc["cluster"]  # allow nesting inside a larger config file
    if "switches" not in doc:
        return _from_counts(p, "cluster", doc)
    default_gpus = doc.get("gpus_per_node")
    nodes: list[Node] = []
    switches = doc["switches"]
    if not isinstance(switches, list) or not switches:
        raise ConfigError(f"{p}: 'switches' must be a non-empty list of {{name, nodes}}")
    for si, sw in enumerate(switches):
        if not isinstance(sw, dict) or "nodes" not in sw:
            raise ConfigError(f"{p}: switches[{si}] needs 'nodes' (a list of node names or {{name, gpus}})")
        sname = str(sw.get("name", f"s{si}"))
        for ni, nd in enumerate(sw["nodes"] or []):
            where = f"switches[{si}].nodes[{ni}]"
            if isinstance(nd, dict):
                name, gpus = nd.get("name"), nd.get("gpus", default_gpus)
                cpus, mem = nd.get("cpus", doc.get("cpus_per_node", 0)), nd.get("mem_gb", doc.get("mem_gb_per_node", 0))
            else:
                name, gpus = nd, default_gpus
                cpus, mem = doc.get("cpus_per_node", 0), doc.get("mem_gb_per_node", 0)
            if not name:
                raise ConfigError(f"{p}:{where}: node needs a name")
            if gpus is None:
                raise ConfigError(f"{p}:{where}: no GPU count; give 'gpus' or a top-level gpus_per_node")
            g = _int_field(p, where, "gpus", gpus, 1)
            nodes.append(Node(str(name), sname, g, _int_field(p, where, "cpus", cpus or 0, 0), float(mem or 0)))
    try:
        return Cluster(tuple(nodes))
    except ValueError as exc:
        raise ConfigError(f"{p}: {exc}; node names must be unique") from None
