"""Per-GPU gres types: how a shard job is put on the GPU the plan chose (Slurm 22.05).

Slurm gives an untyped ``--gres=shard:N`` job the lowest GPU index of the node
with N free shards (first fit), and cannot move a pending job from an untyped
to a typed request. What it can do, measured on 22.05.8 (docs/gandiva.md,
"Which GPU a shard job gets"):

- with one Type per GPU in gres.conf (``Name=shard Type=g2 File=.../nvidia2``),
  a job asking ``shard:g2:N`` gets exactly GPU 2 (``IDX:2``,
  ``CUDA_VISIBLE_DEVICES=2``);
- a pending job that asks no gres may be given a typed request once
  (``scontrol update gres=shard:g2:1``), and a request naming several types
  (``shard:g0:1,shard:g1:1,...``) holds one shard of each of those GPUs;
- after that the types are fixed for good: a second update adds types (the
  old one stays allocated), ``TresPerNode=`` followed by a new type makes
  slurmctld abort at its next scheduling pass, and a requeued job keeps its
  types (only the counts may change).

So etc/job_submit.lua takes an untyped shard request off a job it holds and
keeps it in the AdminComment (``teiresias:shard=N``); the controller gives the
job its types when it first releases it. This module holds the naming and
the parsing; it does no I/O.
"""

from __future__ import annotations

import re

GPU_TYPE_PREFIX = "g"
# AdminComment item in which etc/job_submit.lua keeps a held job's untyped shard request.
SHARD_STASH = "teiresias:shard="

_TYPED = re.compile(rf"^(?:gres[:/])?shard:{GPU_TYPE_PREFIX}(\d+)(?::(\d+))?$")
_IDX = re.compile(r"\(IDX:([^)]*)\)")


def gpu_type(index: int) -> str:
    """The gres Type of GPU ``index`` (its index on its node): ``g0``, ``g1``, ..."""
    return f"{GPU_TYPE_PREFIX}{index}"


def shard_gres(gpus: tuple[int, ...], shards: int) -> str:
    """The request that puts a job's ``shards`` on each of ``gpus`` (indices on every node of the job)."""
    return ",".join(f"shard:{gpu_type(i)}:{shards}" for i in sorted(set(gpus)))


def typed_shards(tres_per_node: str) -> tuple[int, ...]:
    """The GPU indices a shard request (or a node's ``Gres=``) names by our types
    (``gres:shard:g2:1`` -> (2,)); () for an untyped request or types that are not ours."""
    out: list[int] = []
    for item in re.sub(r"\(.*?\)", "", tres_per_node or "").split(","):
        m = _TYPED.match(item.strip())
        if m:
            out.append(int(m.group(1)))
    return tuple(sorted(set(out)))


def stashed_shards(admin_comment: str) -> int:
    """The shard count etc/job_submit.lua took off a held job (0: none)."""
    for item in (admin_comment or "").split(";"):
        if item.startswith(SHARD_STASH) and item[len(SHARD_STASH) :].isdigit():
            return int(item[len(SHARD_STASH) :])
    return 0


def _ids(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part or part == "N/A":
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def detail_gpu_ids(detail: str) -> tuple[int, ...]:
    """GPU indices in one node's ``gres_detail`` entry (gpu and shard items alike):
    ``gpu:2(IDX:0-1)`` -> (0, 1); ``shard:g0:1(IDX:0),shard:g1:0(IDX:)`` -> (0,)."""
    return tuple(sorted({i for m in _IDX.finditer(detail or "") for i in _ids(m.group(1))}))
