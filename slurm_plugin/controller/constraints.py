"""Where a job may run, as its owner asked Slurm: ``-w`` (required nodes), ``-x``
(excluded nodes), ``--constraint`` (node features) and a GPU type
(``--gres=gpu:a100:2``). The controller's placement keeps to them
(``Job.nodes_allowed`` / ``nodes_required``, teiresias/policy/placement.py):
Slurm refuses a start elsewhere (BadConstraints), and a node list the
controller pinned used to overwrite the user's ``-w``.

Pure: Slurm's job and nodes in, a NodeConstraint out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_plugin.backends.base import SlurmJob, SlurmNode

# Constraint syntax the controller does not model (counts, matching OR, grouping):
# such a job is placed as if unconstrained and Slurm's refusal backs it off.
_UNMODELLED = set("[]()*")


@dataclass(frozen=True, slots=True)
class NodeConstraint:
    """``allowed``: the nodes it may use (None: any node of its partition);
    ``required``: nodes it must get (``-w``); ``note``: what it asked, for reasons."""

    allowed: frozenset[str] | None = None
    required: frozenset[str] = frozenset()
    note: str = ""

    @property
    def any(self) -> bool:
        return self.allowed is not None or bool(self.required)


def feature_match(expr: str, features: frozenset[str]) -> bool | None:
    """Does a node with ``features`` satisfy ``--constraint=expr``? ``a``, ``a&b``
    (``a,b``), ``a|b``; None for syntax not modelled (counts, ``[..]``, parentheses)."""
    if _UNMODELLED & set(expr):
        return None
    for alternative in expr.split("|"):
        wanted = {f.strip() for f in alternative.replace(",", "&").split("&") if f.strip()}
        if wanted <= features:
            return True
    return False


def node_constraint(sj: SlurmJob, user_nodes: str | None, nodes: Iterable[SlurmNode]) -> NodeConstraint:
    """The nodes of ``sj``'s partition(s) it may use. ``user_nodes``: its ``-w`` as
    first seen (JobRecord.user_nodes; Slurm's ReqNodeList is the controller's pin
    after a start), None when unknown (then ``-w`` is not modelled)."""
    wanted = set(sj.partition.split(","))
    part = [n for n in nodes if wanted & set(n.partitions)]
    allowed: set[str] | None = None
    notes: list[str] = []
    if sj.excluded_nodes:
        allowed = {n.name for n in part} - set(sj.excluded_nodes)
        notes.append(f"-x {','.join(sj.excluded_nodes)}")
    if sj.features:
        matching = {n.name for n in part if feature_match(sj.features, n.features)}
        if feature_match(sj.features, frozenset()) is not None:
            allowed = matching if allowed is None else allowed & matching
        notes.append(f"--constraint={sj.features}")
    if sj.gpu_type:
        typed = {n.name for n in part if sj.gpu_type in n.gpu_types}
        allowed = typed if allowed is None else allowed & typed
        notes.append(f"GPU type {sj.gpu_type}")
    required = frozenset(x for x in (user_nodes or "").split(",") if x)
    if required:
        notes.insert(0, f"-w {','.join(sorted(required))}")
    return NodeConstraint(None if allowed is None else frozenset(allowed), required, "; ".join(notes))


def never_fits_nodes(sj: SlurmJob, c: NodeConstraint, nodes: Iterable[SlurmNode]) -> str | None:
    """Why the nodes the job may use can never hold it (a GPU type no node has, an
    exclusion or constraint that leaves too few GPUs, a required node outside its
    partition), or None."""
    if not c.any:
        return None
    wanted = set(sj.partition.split(","))
    part = {n.name: n for n in nodes if wanted & set(n.partitions)}
    if not part:
        return None
    if sj.gpu_type and not any(sj.gpu_type in n.gpu_types for n in part.values()):
        types = sorted({t for n in part.values() for t in n.gpu_types})
        return (
            f"asks for GPU type {sj.gpu_type}; no node of partition {sj.partition} has it"
            f" (types there: {', '.join(types) or 'none, untyped GPUs only'}): it can never start"
            " (cancel it and resubmit without the type)"
        )
    outside = sorted(c.required - set(part))
    if outside:
        return f"requires node(s) {','.join(outside)} (-w), not in partition {sj.partition}: it can never start"
    usable = set(part) if c.allowed is None else c.allowed & set(part)
    if sj.gpus_per_node:
        able = sum(1 for n in usable if part[n].gpus >= sj.gpus_per_node)
        if able < sj.num_nodes:
            return (
                f"asks for {sj.num_nodes} node(s) with {sj.gpus_per_node} GPUs each; {c.note} leaves"
                f" {able} such node(s) in partition {sj.partition}: it can never start"
            )
        return None
    total = sum(part[n].gpus for n in usable)
    if sj.gpus > total:
        return f"asks for {sj.gpus} GPUs; {c.note} leaves {total} in partition {sj.partition}: it can never start"
    if c.required and sj.gpus < len(c.required):
        return f"asks for {sj.gpus} GPU(s) on {len(c.required)} required nodes (-w): teiresias gives each node a GPU"
    return None


def waiting_reason(gpus: int, c: NodeConstraint, free: dict[str, int]) -> str:
    """Why a job whose owner restricted its nodes still waits, in those terms (the
    plan's reason counts the free GPUs of the whole cluster)."""
    # A -w job needs a GPU on each of its nodes: what is free there is what matters.
    usable = c.required or (set(free) if c.allowed is None else c.allowed)
    there = sum(free.get(n, 0) for n in usable)
    return f"waiting for {gpus} GPUs where its {c.note} lets it run: {there} free there, {sum(free.values())} in all"
