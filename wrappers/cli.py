"""``teiresias sbatch``: the same as ``tsbatch`` (wrappers/tsbatch.py).

click must not parse these arguments (they are sbatch's), so the command
takes them all raw and hands them to ``tsbatch.submit``."""

from __future__ import annotations

import click

from wrappers import tsbatch


@click.command(
    "sbatch",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def sbatch(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Submit like sbatch, with checkpoint/resume (tsbatch); --help for details.

    \b
    Example:
      teiresias sbatch --checkpoint-dir=/shared/ckpt -p gpu -t 60 train.sh
    """
    ctx.exit(tsbatch.submit(list(args)))
