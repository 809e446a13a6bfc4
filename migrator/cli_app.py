"""The typer app of ``neuron-migrate`` (see migrator/cli.py and ../shared/CONTRACT.md).

Imported only when a command line needs it: a subcommand, help, a usage error, or migrate options
the fast parser of :mod:`migrator.cli` leaves to typer. ``migrate`` here is a thin wrapper of
:func:`migrator.cli.run_migrate`, the body the fast path runs too.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperGroup

from migrator import __version__
from migrator import cli
from migrator.cli import SUBCOMMANDS, UsageError, error_line, explain_text, rule_loader, rules_markdown
from migrator.engine import RuleSelection


class _Group(TyperGroup):
    """A first argument that is not a subcommand means ``migrate``."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0] not in SUBCOMMANDS and args[0] not in ("--help", "-h", "--version"):
            args = ["migrate", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage("neuron-migrate", "[OPTIONS] PATH... | verify SCRIPT ... | rules | explain RULE_ID")


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Migrate projects from optimum-neuron / torch-xla to native PyTorch on Trainium.\n\n"
    "`neuron-migrate PATH --help` lists the migrate options (--write, --check, --format...).",
)


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    sarif = "sarif"
    github = "github"



def _version(value: bool) -> None:
    if value:
        typer.echo(f"neuron-migrate {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Migrate projects from optimum-neuron / torch-xla to native PyTorch on Trainium.

    neuron-migrate PATH...        dry run: print the diff (add --write to apply)
    """


def _fail(message: str) -> typer.Exit:
    typer.echo(error_line(message), err=True)
    return typer.Exit(2)


# hidden: reached only through _Group (``neuron-migrate migrate`` names a path called migrate)
@app.command("migrate", hidden=True, help="Migrate PATH... (dry run unless --write).")
def migrate(
    paths: List[Path] = typer.Argument(..., metavar="PATH", help="Files or directories to migrate."),
    write: bool = typer.Option(False, "--write", help="Apply the changes in place (atomic per file)."),
    check: bool = typer.Option(False, "--check", help="CI mode: exit 1 if a change is pending or a marker remains."),
    diff: Optional[bool] = typer.Option(None, "--diff/--no-diff", help="Show diffs (default: only in a dry run)."),
    fmt: Format = typer.Option(Format.text, "--format", help="Report format."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the report to this file."),
    select: Optional[List[str]] = typer.Option(None, "--select", help="Rule ids or prefixes (comma-separated)."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", help="Rule ids or prefixes to skip."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Worker processes (default: all cores)."),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Permit --write on files with uncommitted changes."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    exclude: Optional[List[str]] = typer.Option(None, "--exclude", help="Skip paths matching this glob (repeatable)."),
) -> None:
    try:
        code = cli.run_migrate(
            paths, write=write, check=check, diff=diff, fmt=fmt.value, output=output, select=select,
            ignore=ignore, jobs=jobs, allow_dirty=allow_dirty, no_progress=no_progress, exclude=exclude,
        )
    except UsageError as exc:
        raise _fail(str(exc))
    raise typer.Exit(code)


@app.command("rules", help="List every rule: id, title, fix kind, file kinds.")
def rules_cmd(
    fmt: str = typer.Option("text", "--format", help="text, markdown or json."),
) -> None:
    rules = RuleSelection(rule_loader()).load_all()
    if fmt == "json":

        typer.echo(json.dumps([{"id": r.id, "title": r.title, "fix": r.fix, "kinds": list(r.kinds)} for r in rules], indent=2))
    elif fmt == "markdown":
        typer.echo(rules_markdown(rules), nl=False)
    elif fmt == "text":
        width = max(len(r.title) for r in rules)
        for r in rules:
            typer.echo(f"{r.id}  {r.fix:<6}  {r.title:<{width}}  {','.join(r.kinds)}")
    else:
        raise _fail(f"unknown format {fmt!r} (text, markdown, json)")


@app.command("explain", help="Explain one rule: why, example, caveats.")
def explain_cmd(rule_id: str = typer.Argument(..., metavar="RULE_ID")) -> None:
    wanted = rule_id.strip().upper()
    for rule in RuleSelection(rule_loader()).load_all():
        if rule.id == wanted:
            typer.echo(explain_text(rule.doc()), nl=False)
            return
    raise _fail(f"unknown rule {rule_id!r}; `neuron-migrate rules` lists them")


@app.command(
    "verify",
    help="Run a migrated script on Neuron (or an emulated Neuron device) and compare its outputs.",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": False},
)
def verify_cmd(
    ctx: typer.Context,
    script: Path = typer.Argument(..., help="The script to run."),
    device: str = typer.Option("auto", "--device", help="auto, neuron, cpu, emulate or cuda."),
    reference: str = typer.Option("cpu", "--reference", help="cpu or none."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="Golden file to compare with."),
    record: Optional[Path] = typer.Option(None, "--record", help="Write the observations as a golden file."),
    nproc: int = typer.Option(1, "--nproc", min=1, help="Processes (torchrun) for distributed scripts."),
    atol: float = typer.Option(1e-5, "--atol"),
    rtol: float = typer.Option(1e-4, "--rtol"),
    max_recompiles: int = typer.Option(0, "--max-recompiles", min=0),
    timeout: float = typer.Option(1800.0, "--timeout", help="Seconds before the run is killed."),
    fmt: str = typer.Option("text", "--format", help="text or json."),
    output: Optional[Path] = typer.Option(None, "--output"),
) -> None:
    from migrator.verify import Options, run_verify

    # typer may vendor its own click: compare the ParameterSource by name
    source = getattr(ctx.get_parameter_source("reference"), "name", None)
    opts = Options(
        script=script, script_args=list(ctx.args), device=device, reference=reference,
        reference_explicit=source not in (None, "DEFAULT", "DEFAULT_MAP"),
        baseline=baseline, record=record, nproc=nproc, atol=atol, rtol=rtol,
        max_recompiles=max_recompiles, timeout=timeout, fmt=fmt, output=output,
    )
    code, _report = run_verify(opts, out=sys.stdout, err=sys.stderr)
    raise typer.Exit(code)
