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
import io
from pathlib import Path
from typing import Any

from teiresias import yamlconf
from teiresias.domain import Cluster, Node
from teiresias.errors import ConfigError

SPEC_COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
_REQUIRED = SPEC_COLUMNS[:3]
# Keys of the YAML forms; anything else is a typo (e.g. 'switchs') and an error.
_EXPLICIT_KEYS = ("switches", "gpus_per_node", "cpus_per_node", "mem_gb_per_node")
_NODE_KEYS = ("name", "gpus", "cpus", "mem_gb")


def load_cluster(path: str | Path) -> Cluster:
    """Load a Tiresias spec CSV or a YAML cluster file (chosen by extension)."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise ConfigError(f"{p}: cluster spec not found; pass a .csv (Tiresias cluster_spec) or .yaml file")
    if p.suffix.lower() in (".yaml", ".yml"):
        return _load_yaml(p)
    return _load_csv(p)


def _int_field(p: Path, line: str | None, key: str, value: Any, minimum: int) -> int:
    """A whole number. ``line``: the CSV line, for the CSV inputs' format (``FILE:LINE: key must ...``);
    None for YAML, whose errors take teiresias/yamlconf.py's (``FILE: dotted.key: must ...``)."""
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        problem = f"must be an integer, got {value!r}"
    else:
        if n >= minimum:
            return n
        problem = f"must be >= {minimum}, got {n}"
    raise ConfigError(f"{p}: {key}: {problem}" if line is None else f"{p}:{line}: {key} {problem}")


def _from_counts(p: Path, where: str | None, row: dict[str, Any]) -> Cluster:
    missing = [k for k in _REQUIRED if row.get(k) in (None, "")]
    if missing:
        at = f"{p}:" if where is None else f"{p}:{where}:"
        raise ConfigError(f"{at} missing {', '.join(missing)}; a cluster spec needs {', '.join(SPEC_COLUMNS)}")
    return Cluster.from_tiresias_spec(
        _int_field(p, where, "num_switch", row["num_switch"], 1),
        _int_field(p, where, "num_node_p_switch", row["num_node_p_switch"], 1),
        _int_field(p, where, "num_gpu_p_node", row["num_gpu_p_node"], 1),
        _int_field(p, where, "num_cpu_p_node", row.get("num_cpu_p_node") or 0, 0),
        float(_int_field(p, where, "mem_p_node", row.get("mem_p_node") or 0, 0)),
    )


def _load_csv(p: Path) -> Cluster:
    with io.StringIO(yamlconf.read_text(p, "cluster spec"), newline="") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames:
            raise ConfigError(f"{p}:1: empty cluster spec; expected header {','.join(SPEC_COLUMNS)}")
        fields = [f.strip() for f in reader.fieldnames]
        missing = [k for k in _REQUIRED if k not in fields]
        if missing:
            raise ConfigError(f"{p}:1: missing column {', '.join(missing)}; expected header {','.join(SPEC_COLUMNS)}")
        rows = [{(k or "").strip(): v for k, v in r.items()} for r in reader]
    if len(rows) != 1:
        raise ConfigError(f"{p}: expected exactly one data row after the header, found {len(rows)}")
    return _from_counts(p, "2", rows[0])


def _load_yaml(p: Path) -> Cluster:
    doc = yamlconf.load_yaml(p, "cluster spec")
    if not isinstance(doc, dict):
        raise ConfigError(f"{p}: expected a mapping with 'switches:' or num_switch/num_node_p_switch/num_gpu_p_node")
    if "cluster" in doc and isinstance(doc["cluster"], dict):
        doc = doc["cluster"]  # allow nesting inside a larger config file
    yamlconf.check_keys(p, doc, (*_EXPLICIT_KEYS, *SPEC_COLUMNS))
    if "switches" not in doc:
        return _from_counts(p, None, doc)
    mixed = [k for k in SPEC_COLUMNS if k in doc]
    if mixed:
        raise ConfigError(
            f"{p}: {', '.join(mixed)} belong to the counts form; with 'switches:' use {', '.join(_EXPLICIT_KEYS[1:])}"
        )
    default_gpus = doc.get("gpus_per_node")
    nodes: list[Node] = []
    # The one switches parser (teiresias/domain/topology.py): the controller's
    # topology.switches reads the same list (or {switch: [nodes]}) form.
    topology, entries = yamlconf.switches(p, "switches", doc["switches"])
    if not topology.switches:
        raise ConfigError(f"{p}: 'switches' must be a non-empty list of {{name, nodes}}")
    for si, ((sname, names), raw) in enumerate(zip(topology.switches, entries)):
        for ni, (name, nd) in enumerate(zip(names, raw)):
            where = f"switches[{si}].nodes[{ni}]"
            if isinstance(nd, dict):
                yamlconf.check_keys(p, nd, _NODE_KEYS, where)
                gpus = nd.get("gpus", default_gpus)
                cpus, mem = nd.get("cpus", doc.get("cpus_per_node", 0)), nd.get("mem_gb", doc.get("mem_gb_per_node", 0))
            else:
                gpus = default_gpus
                cpus, mem = doc.get("cpus_per_node", 0), doc.get("mem_gb_per_node", 0)
            if gpus is None:
                raise ConfigError(f"{p}: {where}: no GPU count; give 'gpus' or a top-level gpus_per_node")
            g = _int_field(p, None, f"{where}.gpus", gpus, 1)
            nodes.append(Node(name, sname, g, _int_field(p, None, f"{where}.cpus", cpus or 0, 0), float(mem or 0)))
    try:
        return Cluster(tuple(nodes))
    except ValueError as exc:
        raise ConfigError(f"{p}: {exc}; node names must be unique") from None
