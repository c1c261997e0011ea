"""Split a tsbatch command line the way sbatch's getopt_long would read it.

We need to know where sbatch's options end and the script (and its
arguments) begin, and to take out our own few options. sbatch stops at the
first argument that is not an option (or its value), so we must know which
options take a value: the table below is Slurm 22.05's sbatch (``sbatch
--help`` plus the options it accepts without listing). When we meet an
option we do not know, we do not guess: the caller hands the original
command line to sbatch untouched, so an unknown option gets sbatch's own
error text and exit code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Long options that need a value (``--x=v`` or ``--x v``).
LONG_VALUE = frozenset(
    """
account acctg-freq array batch bb bbf begin chdir cluster cluster-constraint clusters comment constraint
container core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot dependency
distribution error exclude export export-file extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node
gpus-per-socket gpus-per-task gres gres-flags hint input job-name kill-on-invalid-dep licenses mail-type
mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nodefile nodelist nodes ntasks
ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output
partition power prefer priority profile qos reservation signal sockets-per-node switches thread-spec
threads-per-core time time-min tmp tres-per-task uid wait-all-nodes wckey wrap
""".split()
)
# Long options whose value is optional: only ``--x=v`` gives one.
LONG_OPTIONAL = frozenset("exclusive get-user-env nice no-kill propagate".split())
# Long options without a value.
LONG_FLAG = frozenset(
    """
contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot requeue
spread-job test-only usage use-min-nodes verbose version wait
""".split()
)
SHORT_VALUE = frozenset("aAbcdDeFGiJLmMnNopqStwxBCr")
SHORT_FLAG = frozenset("hHkOQsvVW")

# Ours. No short forms: sbatch uses most letters.
OWN_VALUE = frozenset({"checkpoint-dir", "checkpoint-every", "app", "iterations", "elastic"})
OWN_FLAG = frozenset({"no-checkpoint", "profile", "no-profile"})


@dataclass
class Parsed:
    """A tsbatch command line, split.

    ``sbatch_opts`` keeps sbatch's options in order, unchanged (minus
    ``--comment``/``--wrap``, which we re-emit). ``script`` is None when the
    script comes from ``--wrap`` or standard input. ``unknown`` names the first
    option we could not classify: the caller then defers to sbatch.
    """

    own: dict[str, str] = field(default_factory=dict)
    sbatch_opts: list[str] = field(default_factory=list)
    script: str | None = None
    script_args: list[str] = field(default_factory=list)
    comment: str | None = None
    wrap: str | None = None
    help: bool = False
    has_signal: bool = False
    unknown: str | None = None
    passthrough: list[str] = field(default_factory=list)  # argv minus our own options


def _resolve_long(name: str) -> str | None:
    """Exact name, else a unique prefix (getopt_long accepts abbreviations)."""
    every = LONG_VALUE | LONG_OPTIONAL | LONG_FLAG
    if name in every or name in OWN_VALUE or name in OWN_FLAG:
        return name
    matches = [o for o in every if o.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def parse(argv: list[str]) -> Parsed:
    p = Parsed()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            p.passthrough.append(arg)
            i += 1
            break
        if arg == ":":  # heterogeneous job separator
            p.sbatch_opts.append(arg)
            p.passthrough.append(arg)
            i += 1
            continue
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            full = _resolve_long(name)
            # sbatch's own --profile=<value> (acct_gather) keeps its "=": bare --profile is ours.
            if full in OWN_FLAG and not eq:
                p.own[full] = "1"
                i += 1
                continue
            if full in OWN_VALUE:
                if not eq:
                    if i + 1 >= len(argv):
                        p.own[full] = ""
                        i += 1
                        continue
                    value = argv[i + 1]
                    i += 1
                p.own[full] = value
                i += 1
                continue
            if full is None:
                p.unknown = arg
                p.passthrough.extend(argv[i:])
                return p
            opt = [arg]
            if full in LONG_VALUE and not eq:
                if i + 1 >= len(argv):
                    p.unknown = arg  # sbatch: "option requires an argument"
                    p.passthrough.extend(argv[i:])
                    return p
                value = argv[i + 1]
                opt.append(value)
            i += len(opt)
            p.passthrough.extend(opt)
            if full == "help":
                p.help = True
            elif full == "comment":
                p.comment = value
            elif full == "wrap":
                p.wrap = value
            else:
                p.has_signal |= full == "signal"
                p.sbatch_opts.extend(opt)
            continue
        if arg.startswith("-") and len(arg) > 1:
            j, opt = 1, [arg]
            while j < len(arg):
                c = arg[j]
                if c in SHORT_FLAG:
                    p.help |= c == "h"
                    j += 1
                    continue
                if c in SHORT_VALUE:
                    if j + 1 == len(arg):  # value is the next word
                        if i + 1 >= len(argv):
                            p.unknown = arg
                            p.passthrough.extend(argv[i:])
                            return p
                        opt.append(argv[i + 1])
                    break
                p.unknown = arg
                p.passthrough.extend(argv[i:])
                return p
            i += len(opt)
            p.passthrough.extend(opt)
            p.sbatch_opts.extend(opt)
            continue
        break  # the script
    if i < len(argv):
        p.passthrough.extend(argv[i:])
        if p.wrap is None and p.script is None:
            p.script, p.script_args = argv[i], argv[i + 1 :]
        else:
            p.script_args = argv[i:]
    return p
