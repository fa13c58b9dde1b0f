"""The `unmask` command line.

Each subcommand lives in its own module `cli/cmd_<name>.py` exposing a click
command called `command`; the group finds them by file name and imports one
only when it runs, so `unmask --help` stays fast. The CLI maps flags onto
GenerationConfig and the Python API; nothing below this package imports click.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import click

from .. import __version__
from ..errors import UnmaskError

_HERE = Path(__file__).parent


class _LazyGroup(click.Group):
    def list_commands(self, ctx):
        names = sorted(p.stem[len("cmd_"):] for p in _HERE.glob("cmd_*.py"))
        return names + sorted(super().list_commands(ctx))

    def get_command(self, ctx, name):
        if not (_HERE / f"cmd_{name}.py").is_file():
            return super().get_command(ctx, name)
        return importlib.import_module(f"{__name__}.cmd_{name}").command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="unmask")
@click.option("--debug", is_flag=True, help="Show full tracebacks and debug logs.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run diffusion language models (LLaDA, Dream) on this device.

    \b
    Examples:
      unmask chat                            # chat with the embedded model
      unmask generate -p "What is 12 + 30?"  # one answer, then exit
      unmask export ./LLaDA-8B ./llada-int4 --precision int4
      unmask devices                         # what runs where
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s: %(message)s")


def main(argv: list[str] | None = None) -> int:
    """Console entry point: expected errors become one line on stderr, exit code 1."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="unmask", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except UnmaskError as exc:
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    return 0
