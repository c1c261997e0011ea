"""Do two trees of teiresias simulate the same? For restructurings that must not
change any figure: the same `teiresias simulate` runs (every non-oracle policy,
the Gittins variants, HiveD cells) on a git ref and on the working tree, and
every figure compared except wall time. Exit 0 when all agree, 1 otherwise.

Example:
    .venv/bin/python scripts/same_figures.py 292183d
    .venv/bin/python scripts/same_figures.py HEAD~5 --skip-policy themis
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import click

REPO = Path(__file__).resolve().parent.parent
SAMPLES = "teiresias/data/yarn-gput1000.csv"
POLICIES = ("fifo", "best-effort", "srsf", "las", "gittins", "themis", "sjf-bsbf", "sjf-ffs")


def runs(policies: list[str]) -> dict[str, list[str]]:
    """Each run's name and its `simulate` arguments (trace and cluster added by the caller)."""
    return {
        "policies": ["-p", ",".join(policies), "-g", SAMPLES],
        "gittins-variants": [
            "-p",
            "las,gittins",
            "-g",
            SAMPLES,
            "-L",
            "gittins",
            "--preempt-cost",
            "30",
            "-k",
            "2",
            "-o",
            "30",
            "--placement",
            "profile",
        ],
        "cells": ["-p", "las,gittins", "-g", SAMPLES, "-C", "etc/cells.example.yaml"],
    }


def simulate(root: Path, trace: Path, args: list[str], out: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [
        sys.executable,
        "-m",
        "teiresias",
        "simulate",
        "-t",
        str(trace),
        "-c",
        "etc/cluster.yaml",
        *args,
        "--json",
        str(out),
    ]
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise click.ClickException(f"simulate in {root} exited {r.returncode}: {r.stderr.strip()[-300:]}")


def flat(value: object, path: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in flat(sub, f"{path}/{key}").items()}
    if isinstance(value, list):
        return {k: v for i, sub in enumerate(value) for k, v in flat(sub, f"{path}[{i}]").items()}
    return {path: value}


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, help=__doc__)
@click.argument("ref")
@click.option("-n", "--jobs", default=300, show_default=True, help="Jobs in the synthesized Philly-like trace.")
@click.option("-s", "--seed", default=3, show_default=True)
@click.option("--skip-policy", multiple=True, help="Leave a policy out (one whose figures changed on purpose).")
def main(ref: str, jobs: int, seed: int, skip_policy: tuple[str, ...]) -> None:
    policies = [p for p in POLICIES if p not in skip_policy]
    with tempfile.TemporaryDirectory(prefix="same-figures-") as tmp:
        work = Path(tmp)
        old = work / "old"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), ref], cwd=REPO, check=True)
        try:
            trace = work / "trace.csv"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "teiresias",
                    "trace",
                    "synth",
                    "-k",
                    "philly",
                    "-n",
                    str(jobs),
                    "-S",
                    SAMPLES,
                    "--cluster",
                    "etc/cluster.yaml",
                    "-l",
                    "2",
                    "-s",
                    str(seed),
                    "-o",
                    str(trace),
                ],
                cwd=REPO,
                check=True,
                capture_output=True,
            )
            differ = 0
            for name, args in runs(policies).items():
                figures = []
                for label, root in (("old", old), ("new", REPO)):
                    out = work / f"{name}-{label}.json"
                    simulate(root, trace, args, out)
                    figures.append(flat(json.loads(out.read_text())))
                before, after = figures
                changed = sorted(
                    k for k in before.keys() & after.keys() if not k.endswith("/wall_seconds") and before[k] != after[k]
                )
                gone = sorted(before.keys() - after.keys())
                print(
                    f"{name}: {len(before)} figures at {ref}, {len(after)} now "
                    f"({len(after.keys() - before.keys())} new keys), {len(changed)} changed, {len(gone)} gone"
                )
                for k in changed[:20]:
                    print(f"  {k}: {before[k]} -> {after[k]}")
                differ += len(changed) + len(gone)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO, check=False)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
