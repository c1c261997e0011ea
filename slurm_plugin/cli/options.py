"""Options that several controller-side commands share, so that each reads the same."""

from __future__ import annotations

import click

config_option = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The site's config (default: $TEIRESIAS_CONFIG, else /etc/teiresias/teiresias.yaml).",
)
