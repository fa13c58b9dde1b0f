"""`unmask list`: the model packages in the local store (name, family, precision, size, where)."""

from __future__ import annotations

import json

import click

EXAMPLES = """\b
Examples:
  unmask list
  unmask list --json
"""


@click.command("list", epilog=EXAMPLES)
@click.option("--json", "as_json", is_flag=True, help="Print the entries as a JSON list.")
def command(as_json: bool) -> None:
    """List the packages in the model store; any command takes their NAME in place of a path.

    The store is $UNMASK_MODELS, else the user's data folder (`unmask export SRC NAME` writes there).
    """
    from .. import store

    found = store.entries()
    if as_json:
        click.echo(json.dumps([{"name": e.name, "architecture": e.architecture, "precision": e.precision,
                                "size_bytes": e.size_bytes, "path": str(e.path), "problem": e.problem}
                               for e in found], indent=2))
        return
    if not found:
        click.echo(f"no model packages in {store.store_dir()}; add one with `unmask export SRC NAME`")
        return
    width = max(len("name"), *(len(e.name) for e in found))
    click.echo(f"{'name':<{width}}  {'family':<8} {'precision':<9} {'size':>10}  where")
    for e in found:
        where = str(e.path) if e.problem is None else f"{e.path} (unreadable: {e.problem})"
        click.echo(f"{e.name:<{width}}  {e.architecture:<8} {e.precision:<9} {e.size_bytes / 2**20:>6.1f} MiB  {where}")
