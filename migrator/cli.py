"""The ``neuron-migrate`` command line (see ../shared/CONTRACT.md).

``neuron-migrate PATH...`` migrates; ``verify``, ``rules`` and ``explain`` are
subcommands. A path literally named like a subcommand is reached with ``--``.
Reports are printed as plain text (never through rich markup, so ``[...]`` survives).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, Optional

import typer
from typer.core import TyperGroup

from migrator import __version__
from migrator.config import ConfigError, load_config
from migrator.discover import discover
from migrator.engine import RuleSelection, SelectionError, default_jobs, parse_ids, run
from migrator.model import RunResult
from migrator.report import RuleInfo, render
from migrator.write import atomic_write, dirty_files

if TYPE_CHECKING:  # pragma: no cover
    from migrator.model import FileResult

# Fast start: this module imports only what every migrate run needs. The rules (and libcst) are
# imported by the engine when a file passes its byte pre-filter; the rule documentation by a report
# that shows it (_RuleInfos); the progress bar and verify by the paths that use them.

SUBCOMMANDS = ("verify", "rules", "explain")
def rule_loader() -> str:
    """Where the rules come from: ``module:function`` returning rule instances.

    ``NEURON_MIGRATE_RULES`` replaces the built-in set (``codemods:all_rules``), e.g. to add a
    project's own rules; the CLI tests use it to run on a fixed set of rules.
    """
    return os.environ.get("NEURON_MIGRATE_RULES") or "codemods:all_rules"


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
    typer.echo(f"neuron-migrate: error: {message}", err=True)
    return typer.Exit(2)


def rule_infos() -> dict[str, RuleInfo]:
    infos = {}
    for rule in RuleSelection(rule_loader()).load_all():
        doc = rule.doc()
        infos[rule.id] = RuleInfo(rule.id, rule.title, rule.fix, doc.why)
    return infos


class _RuleInfos(Mapping):
    """:func:`rule_infos`, computed when a report first reads it (a run with no finding never does)."""

    def __init__(self) -> None:
        self._infos: dict[str, RuleInfo] | None = None

    def _get(self) -> dict[str, RuleInfo]:
        if self._infos is None:
            self._infos = rule_infos()
        return self._infos

    def __getitem__(self, key: str) -> RuleInfo:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


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
    started = time.perf_counter()
    if write and check:
        raise _fail("--write and --check cannot be used together")
    try:
        config = load_config(paths[0] if paths else Path.cwd())
    except ConfigError as exc:
        raise _fail(str(exc))
    select_ids = parse_ids(select) if select else (tuple(parse_ids(config.select)) if config.select else None)
    ignore_ids = parse_ids(ignore) if ignore else tuple(parse_ids(config.ignore))
    selection = RuleSelection(rule_loader(), select_ids, ignore_ids)
    try:
        selection.chosen_ids()
    except SelectionError as exc:
        raise _fail(str(exc))
    excludes = list(config.exclude) + list(exclude or [])
    candidates, errors = discover(paths, excludes)

    progress_cb, stop_progress = _progress(no_progress, len(candidates))
    try:
        results = run(candidates, selection, jobs or config.jobs or default_jobs(), progress_cb)
    finally:
        stop_progress()
    results = sorted(results + list(errors), key=lambda r: r.path)

    if write:
        _write(results, candidates, allow_dirty)
    mode = "write" if write else ("check" if check else "dry-run")
    show_diff = diff if diff is not None else mode == "dry-run"
    run_result = RunResult(results, time.perf_counter() - started, wrote=write)
    report = render(run_result, fmt.value, rules=_RuleInfos(), show_diff=show_diff, mode=mode)
    if output is not None:
        try:
            output.write_text(report, encoding="utf-8")
        except OSError as exc:
            raise _fail(f"cannot write {output}: {exc.strerror or exc}")
    else:
        sys.stdout.write(report)
        sys.stdout.flush()
    raise typer.Exit(exit_code(run_result, mode))


def exit_code(run_result: RunResult, mode: str) -> int:
    if any(r.status in ("error", "skipped") for r in run_result.files):
        return 2
    if run_result.summary["manual_actions"]:
        return 1
    if mode != "write" and run_result.summary["files_changed"]:
        return 1
    return 0


def _write(results: list[FileResult], candidates, allow_dirty: bool) -> None:
    by_display = {c.display: c for c in candidates}
    changed = [r for r in results if r.status == "changed" and r.new_bytes is not None]
    dirty = set() if allow_dirty else dirty_files(by_display[r.path].path for r in changed)
    for r in changed:
        path = by_display[r.path].path
        if path in dirty or path.resolve() in dirty:
            r.fail("has uncommitted changes; commit or stash them first, or pass --allow-dirty")
            continue
        try:
            atomic_write(path, r.new_bytes)  # type: ignore[arg-type]
        except OSError as exc:
            r.fail(f"cannot write: {exc.strerror or exc}")


def _progress(disabled: bool, total: int):
    if disabled or total < 200 or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("migrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    )
    task = bar.add_task("files", total=total)
    bar.start()

    def update(done: int, _total: int) -> None:
        bar.update(task, completed=done)

    return update, bar.stop


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


def rules_markdown(rules) -> str:
    lines = ["| id | title | fix | files |", "|---|---|---|---|"]
    for r in rules:
        title = r.title.replace("|", "\\|")
        lines.append(f"| {r.id} | {title} | {r.fix} | {', '.join(r.kinds)} |")
    return "\n".join(lines) + "\n"


@app.command("explain", help="Explain one rule: why, example, caveats.")
def explain_cmd(rule_id: str = typer.Argument(..., metavar="RULE_ID")) -> None:
    wanted = rule_id.strip().upper()
    for rule in RuleSelection(rule_loader()).load_all():
        if rule.id == wanted:
            typer.echo(explain_text(rule.doc()), nl=False)
            return
    raise _fail(f"unknown rule {rule_id!r}; `neuron-migrate rules` lists them")


def explain_text(doc) -> str:
    parts = [f"{doc.id}: {doc.title}", f"fix: {doc.fix}; files: {', '.join(doc.kinds)}", "", doc.why]
    if doc.before:
        parts += ["", "Before:", "", _indent(doc.before)]
    if doc.after:
        parts += ["", "After:", "", _indent(doc.after)]
    if doc.caveats:
        parts += ["", "Caveats:", "", doc.caveats]
    return "\n".join(parts) + "\n"


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.splitlines())


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


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, prog_name="neuron-migrate", standalone_mode=True)
    except SystemExit as exc:  # typer/click exit
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return 0


def entry() -> None:
    sys.exit(main())
