"""The ``teiresias`` command. Subcommands live in their own modules and are
imported only when used, so ``teiresias queue`` never pays for matplotlib and
a broken optional part cannot break the others."""

from __future__ import annotations

import importlib
import sys

import click

from teiresias.errors import TeiresiasError

# name -> "module:attribute" of a click command or group
SUBCOMMANDS: dict[str, str] = {
    "simulate": "teiresias.cli.simulate:simulate",
    "trace": "teiresias.cli.trace:trace",
    "cells": "slurm_plugin.cli.cells:cells",
    "cluster": "slurm_plugin.cli.cluster:cluster",
    "controller": "slurm_plugin.cli.controller:controller",
    "queue": "slurm_plugin.cli.queue:queue",
    "explain": "slurm_plugin.cli.explain:explain_cmd",
    "demo": "slurm_plugin.cli.demo:demo",
    "sbatch": "wrappers.cli:sbatch",
    "profile": "profiler.cli:profile",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise click.ClickException(f"subcommand {name!r} is unavailable: {exc}") from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # A part that fails to import is listed as such instead of breaking --help.
        rows = []
        for name in self.list_commands(ctx):
            try:
                cmd = self.get_command(ctx, name)
                rows.append((name, cmd.get_short_help_str(limit=formatter.width - 20) if cmd else ""))
            except click.ClickException as exc:
                rows.append((name, f"(unavailable: {exc.message})"))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


class TeiresiasGroup(LazyGroup):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TeiresiasError as exc:
            click.echo(f"teiresias: error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=TeiresiasGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="teiresias")
def cli() -> None:
    """teiresias: Tiresias/HiveD scheduling for Slurm GPU clusters.

    \b
    Examples:
      teiresias cluster up --nodes 4 --gpus-per-node 4
      teiresias controller run --config etc/teiresias.yaml
      teiresias queue --json
      teiresias simulate --trace trace.csv --cluster etc/cluster.yaml --policy las,fifo
    """


def main() -> None:
    # click's usage errors already exit 2; TeiresiasError is mapped to 2 above; a
    # failed write to standard output (> /dev/full, a full disk) is one line, exit 2.
    from teiresias.outputs import StdoutError, flush_stdout, guard_stdout, stdout_failure

    guard_stdout()
    code: int | str | None = 0
    try:
        cli(prog_name="teiresias")
    except SystemExit as exc:
        code = exc.code
    except StdoutError as exc:
        click.echo(f"teiresias: error: {stdout_failure(exc)}", err=True)
        code = 2
    failed = flush_stdout()
    if failed is not None and code in (0, None):
        click.echo(f"teiresias: error: {failed}", err=True)
        code = 2
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
