"""The `fp8tower` command. Thin: parses, calls the library, prints.

One module per command group: info.py (`info`), tune.py (`tune`, `dispatch`), convert.py
(`convert`), bench.py (`bench ...`), trace.py (`trace ...`). At startup only typer and these modules load; each
command imports what it needs (torch, rich, the library) inside its function, so
`fp8tower --help` / `--version` and the torch-free `trace diff` start at once
(benchmarks/cli_startup.py times them).
"""

from __future__ import annotations

import typer

from .. import __version__
from . import bench, convert, info, trace, tune

app = typer.Typer(
    help="fp8tower: fast FP8 linear layers for LLM decode, and paired-trace attribution "
    "of where the time of a decode step went.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: rendering it with rich costs ~0.1 s of startup
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fp8tower {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    # the FP8TOWER_* switches before any work: a bad word was a traceback, after the model's
    # build (env is torch-free: startup stays fast)
    import sys
    import warnings

    from .. import env
    from ._common import fail, warn

    if "--help" in sys.argv[1:]:  # help is always given, whatever the environment says (the
        return  # subcommand's arguments are not this callback's to read)

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env.check_flags()
    except ValueError as e:
        raise fail(str(e)) from None
    for w in caught:  # a misspelt FP8TOWER_* name: one warning line, as the commands print
        warn(str(w.message))


app.command()(info.info)
app.command(name="convert")(convert.convert)
for _cmd in tune.app.registered_commands:  # `tune` and `dispatch` at the top level
    app.registered_commands.append(_cmd)
app.add_typer(trace.app, name="trace")
app.add_typer(bench.app, name="bench")


def main() -> None:
    try:
        app()
    except ImportError as e:  # hf/requires.py's message names the install: one line
        if e.name != "transformers" or "fp8tower[hf]" not in str(e):
            raise
        import sys

        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
