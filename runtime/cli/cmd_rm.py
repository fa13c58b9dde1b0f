"""`unmask rm NAME`: delete a model package from the local store (never a folder elsewhere)."""

from __future__ import annotations

import click

EXAMPLES = """\b
Examples:
  unmask rm tiny
"""


@click.command("rm", epilog=EXAMPLES)
@click.argument("name")
def command(name: str) -> None:
    """Delete the stored package NAME (see `unmask list`)."""
    from .. import store

    entry = store.remove(name)
    click.echo(f"removed {entry.name} ({entry.size_bytes / 2**20:.1f} MiB) from {entry.path.parent}")
