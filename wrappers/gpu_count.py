"""How many GPUs an sbatch submission asks for, read from its options.

tsbatch profiles multi-GPU jobs by default (Tiresias §3.3.1 profiles a job's
communication; a 1-GPU job has none), so it must count the GPUs before Slurm
does. Sources, in sbatch's order of precedence (a later one overrides an
earlier one, option by option): the script's ``#SBATCH`` lines, the
``SBATCH_*`` input environment variables, the command line.

Counted forms: ``-G/--gpus=[type:]N`` (job total), ``--gres=gpu[:type][:N]``
(per node), ``--gpus-per-node=[type:]N`` x nodes, ``--gpus-per-task=[type:]N``
x tasks, ``--gpus-per-socket=[type:]N`` x sockets-per-node x nodes. Node and
task counts take the minimum of a range (``-N 2-4`` counts 2 nodes), so the
result is what the job gets at least. A value we cannot read counts as no
GPUs: sbatch will say what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wrappers.sbatch_args import LONG_VALUE, SHORT_VALUE, _resolve_long

# Short options that matter here -> their long names.
_SHORT = {"G": "gpus", "N": "nodes", "n": "ntasks"}
_WANTED = frozenset(
    {
        "gpus",
        "gres",
        "gpus-per-node",
        "gpus-per-task",
        "gpus-per-socket",
        "nodes",
        "ntasks",
        "ntasks-per-node",
        "sockets-per-node",
    }
)
# sbatch's input environment variables for the same options (read between #SBATCH and the command line).
_ENV = {
    "SBATCH_GPUS": "gpus",
    "SBATCH_GRES": "gres",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket",
}


@dataclass(frozen=True)
class GpuRequest:
    """The options that decide a job's GPU count (None: not given)."""

    gpus: int | None = None
    gres_per_node: int | None = None
    per_node: int | None = None
    per_task: int | None = None
    per_socket: int | None = None
    nodes: int = 1
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    sockets_per_node: int = 1

    @property
    def total(self) -> int:
        """The job's GPUs (at least): the largest of what each form implies."""
        tasks = self.ntasks if self.ntasks is not None else (self.ntasks_per_node or 1) * self.nodes
        counts = [
            self.gpus or 0,
            (self.gres_per_node or 0) * self.nodes,
            (self.per_node or 0) * self.nodes,
            (self.per_task or 0) * tasks,
            (self.per_socket or 0) * self.sockets_per_node * self.nodes,
        ]
        return max(counts)


def option_values(words: Sequence[str]) -> dict[str, str]:
    """The last value of each GPU-related option in ``words`` (sbatch's own spelling:
    ``--x=v``, ``--x v``, unique abbreviations, ``-G2``, ``-G 2``, ``-vN2``)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--") and len(w) > 2:
            name, eq, value = w[2:].partition("=")
            full = _resolve_long(name)
            if full in LONG_VALUE and not eq:
                value = words[i + 1] if i + 1 < len(words) else ""
                i += 1
            if full in _WANTED:
                out[full] = value
        elif w.startswith("-") and len(w) > 1:
            for j, c in enumerate(w[1:], start=1):
                if c not in SHORT_VALUE:
                    continue  # a flag (or unknown: sbatch will say so)
                value = w[j + 1 :]
                if not value:
                    value = words[i + 1] if i + 1 < len(words) else ""
                    i += 1
                if c in _SHORT:
                    out[_SHORT[c]] = value
                break
        i += 1
    return out


def _count(text: str) -> int | None:
    """``N`` or ``type:N`` -> N."""
    last = text.strip().rsplit(":", 1)[-1]
    return int(last) if last.isdigit() else None


def _minimum(text: str) -> int | None:
    """``2``, ``2-4``, ``2,4`` -> 2 (sbatch's minimum)."""
    first = text.strip().replace(",", "-").split("-", 1)[0]
    return int(first) if first.isdigit() else None


def _gres_gpus(text: str) -> int | None:
    """GPUs per node in a --gres list: ``gpu``, ``gpu:2``, ``gpu:a100:2``, ``gres/gpu:2,mps:100``."""
    total, seen = 0, False
    for item in text.split(","):
        parts = item.strip().split(":")
        if parts[0] not in ("gpu", "gres/gpu"):
            continue
        seen = True
        if len(parts) == 1:
            total += 1
        elif parts[-1].isdigit():
            total += int(parts[-1])
        elif len(parts) == 2:
            total += 1  # gpu:<type>, one of them
        else:
            return None
    return total if seen else None


def gpu_request(
    header_words: Sequence[str], cli_words: Sequence[str], env: Mapping[str, str] | None = None
) -> GpuRequest:
    """What the submission asks for; the command line beats the environment beats #SBATCH."""
    values = option_values(header_words)
    for var, name in _ENV.items():
        if env and env.get(var):
            values[name] = env[var]
    values.update(option_values(cli_words))

    def get(name: str, read) -> int | None:
        return read(values[name]) if name in values else None

    return GpuRequest(
        gpus=get("gpus", _count),
        gres_per_node=get("gres", _gres_gpus),
        per_node=get("gpus-per-node", _count),
        per_task=get("gpus-per-task", _count),
        per_socket=get("gpus-per-socket", _count),
        nodes=get("nodes", _minimum) or 1,
        ntasks=get("ntasks", _minimum),
        ntasks_per_node=get("ntasks-per-node", _minimum),
        sockets_per_node=get("sockets-per-node", _minimum) or 1,
    )


def requested_gpus(header_words: Sequence[str], cli_words: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """The GPUs a submission asks for (0 for a CPU job)."""
    return gpu_request(header_words, cli_words, env).total
