"""The ``neuron-migrate`` command line (see ../shared/CONTRACT.md).

``neuron-migrate PATH...`` migrates; ``verify``, ``rules`` and ``explain`` are
subcommands. A path literally named like a subcommand is reached with ``--``.
Reports are printed as plain text (never through rich markup, so ``[...]`` survives).

Two ways in, one body. The typer app (built by :func:`_build_app` on first use; ``migrator.cli.app``)
parses every command line but one: the everyday ``neuron-migrate [OPTIONS] PATH...`` with
well-formed options is first tried by :func:`parse_migrate_argv`, a strict parser of exactly the
migrate options of the contract: when it understands the whole command line, :func:`main` runs
:func:`run_migrate` directly and typer, click and pydantic are never imported (fast start, issue
12). Anything it does not fully understand (help, an unknown option, a bad or missing value, a
subcommand, no path) goes to the typer app unchanged, so every usage error and help text stays
typer's. The typer ``migrate`` command is a thin wrapper of the same :func:`run_migrate`; a
:class:`UsageError` it raises is printed the same way by both (``neuron-migrate: error: ...``,
exit 2).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence

from migrator import __version__

if TYPE_CHECKING:  # pragma: no cover
    from migrator.config import ConfigError, load_config
    from migrator.discover import discover
    from migrator.engine import RuleSelection, SelectionError, default_jobs, parse_ids, run
    from migrator.model import FileResult, RunResult
    from migrator.report import RuleInfo, render
    from migrator.write import atomic_write, dirty_files

# Fast start: this module imports nothing heavy itself, and not typer (imported by _build_app for a
# command line the fast parser leaves to the typer app). What a migrate run needs (_LAZY) is
# imported by _load() when one starts, so ``--help`` and ``--version`` skip it; the names are still
# attributes of this module (tests replace ``discover`` or ``atomic_write`` here).
# The rules (and libcst) are imported by the engine when a file passes its byte pre-filter; the
# rule documentation by a report that shows it (_RuleInfos); the progress bar and verify by the
# paths that use them.
_LAZY = {
    "ConfigError": "migrator.config", "load_config": "migrator.config",
    "discover": "migrator.discover",
    "RuleSelection": "migrator.engine", "SelectionError": "migrator.engine",
    "default_jobs": "migrator.engine", "parse_ids": "migrator.engine", "run": "migrator.engine",
    "RunResult": "migrator.model",
    "RuleInfo": "migrator.report", "render": "migrator.report",
    "atomic_write": "migrator.write", "dirty_files": "migrator.write",
}


def _import_run_modules() -> None:
    import migrator.config  # noqa: F401  (the modules of _LAZY)
    import migrator.discover  # noqa: F401
    import migrator.engine  # noqa: F401
    import migrator.model  # noqa: F401
    import migrator.report  # noqa: F401
    import migrator.write  # noqa: F401


def _load() -> None:
    """Make every name of _LAZY a global of this module (a name already set, e.g. replaced by a
    test, is kept)."""
    module = sys.modules[__name__]
    for name in _LAZY:
        getattr(module, name)

SUBCOMMANDS = ("verify", "rules", "explain")
FORMATS = ("text", "json", "markdown", "sarif", "github")
# set (to anything non-empty) to send every command line through the typer app; for the tests
NO_FASTPATH_ENV = "NEURON_MIGRATE_NO_FASTPATH"
# typer/click shell completion (``_{PROG}_COMPLETE``): left to the typer app
_COMPLETE_ENV = "_NEURON_MIGRATE_COMPLETE"


def rule_loader() -> str:
    """Where the rules come from: ``module:function`` returning rule instances.

    ``NEURON_MIGRATE_RULES`` replaces the built-in set (``codemods:all_rules``), e.g. to add a
    project's own rules; the CLI tests use it to run on a fixed set of rules.
    """
    return os.environ.get("NEURON_MIGRATE_RULES") or "codemods:all_rules"


class UsageError(Exception):
    """A command-line error: printed as ``neuron-migrate: error: MESSAGE``, exit code 2."""


def error_line(message: str) -> str:
    return f"neuron-migrate: error: {message}"


def rule_infos(docs_url: str | None = None) -> dict[str, RuleInfo]:
    """What the reports say of each rule; ``docs_url``: where the docs site is published (``--docs-url``)."""
    from migrator.ruledocs import page_path, page_url

    _load()
    infos = {}
    for rule in RuleSelection(rule_loader()).load_all():
        doc = rule.doc()
        infos[rule.id] = RuleInfo(rule.id, rule.title, rule.fix, doc.why, page=page_path(rule.id),
                                  url=page_url(rule.id, docs_url))
    return infos


class _RuleInfos(Mapping):
    """:func:`rule_infos`, computed when a report first reads it (a run with no finding never does)."""

    def __init__(self, docs_url: str | None = None) -> None:
        self._infos: dict[str, RuleInfo] | None = None
        self._docs_url = docs_url

    def _get(self) -> dict[str, RuleInfo]:
        if self._infos is None:
            self._infos = rule_infos(self._docs_url)
        return self._infos

    def __getitem__(self, key: str) -> RuleInfo:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def run_migrate(
    paths: Sequence[Path],
    *,
    write: bool = False,
    check: bool = False,
    diff: bool | None = None,
    fmt: str = "text",
    output: Path | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    jobs: int | None = None,
    allow_dirty: bool = False,
    no_progress: bool = False,
    exclude: Sequence[str] | None = None,
    docs_url: str | None = None,
) -> int:
    """``neuron-migrate PATH...``: migrate, print (or --output) the report, return the exit code.

    Raises :class:`UsageError` for a usage error (both callers print it and exit 2).
    """
    started = time.perf_counter()
    _load()
    if write and check:
        raise UsageError("--write and --check cannot be used together")
    try:
        config = load_config(paths[0] if paths else Path.cwd())
    except ConfigError as exc:
        raise UsageError(str(exc))
    select_ids = parse_ids(select) if select else (tuple(parse_ids(config.select)) if config.select else None)
    ignore_ids = parse_ids(ignore) if ignore else tuple(parse_ids(config.ignore))
    selection = RuleSelection(rule_loader(), select_ids, ignore_ids)
    try:
        selection.chosen_ids()
    except SelectionError as exc:
        raise UsageError(str(exc))
    from migrator.config import is_docs_url

    if docs_url is not None and not is_docs_url(docs_url):
        raise UsageError(f"--docs-url: expected an absolute URL (https://...), got {docs_url!r}")
    docs_url = docs_url or config.docs_url
    excludes = list(config.exclude) + list(exclude or [])
    skipped_dirs: list[str] = []
    candidates, errors = discover(list(paths), excludes, skipped=skipped_dirs)

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
    run_result = RunResult(results, time.perf_counter() - started, wrote=write, skipped_dirs=sorted(skipped_dirs))
    report = render(run_result, fmt, rules=_RuleInfos(docs_url), show_diff=show_diff, mode=mode)
    if output is not None:
        try:
            output.write_text(report, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}")
    else:
        sys.stdout.write(report)
        sys.stdout.flush()
    return exit_code(run_result, mode)


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


def rules_markdown(rules) -> str:
    """``neuron-migrate rules --format markdown`` (see :func:`migrator.ruledocs.rules_markdown`)."""
    from migrator.ruledocs import rules_markdown as table

    return table(rules)


def explain_text(doc) -> str:
    """What ``neuron-migrate explain`` prints before the page's path (:func:`migrator.ruledocs.explain_text`)."""
    from migrator.ruledocs import explain_text as text

    return text(doc)


def explain_output(doc) -> str:
    """``neuron-migrate explain RULE_ID``: the rule's text, then where its page is."""
    from migrator.ruledocs import page_path

    return explain_text(doc) + f"\nPage: {page_path(doc.id)} (neuron-migrate's documentation)\n"


# --------------------------------------------------------------------------- the typer app


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    sarif = "sarif"
    github = "github"


_app = None


def _typer_app():
    """The typer app (built, and typer imported, on first use: ``migrator.cli.app``)."""
    global _app
    if _app is None:
        _app = _build_app()
    return _app


def _build_app():
    """The typer app: every command line the fast path leaves to it, and the CLI tests.

    Built in a function so that importing this module does not import typer. typer reads the
    commands' annotations (strings, see ``__future__``) in this module's globals: typer is made one.
    """
    global typer
    import typer
    from typer.core import TyperGroup

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
        docs_url: Optional[str] = typer.Option(
            None, "--docs-url", metavar="URL",
            help="Where the docs site is published: the reports link each rule to its page there."),
    ) -> None:
        try:
            code = run_migrate(
                paths, write=write, check=check, diff=diff, fmt=fmt.value, output=output, select=select,
                ignore=ignore, jobs=jobs, allow_dirty=allow_dirty, no_progress=no_progress, exclude=exclude,
                docs_url=docs_url,
            )
        except UsageError as exc:
            raise _fail(str(exc))
        raise typer.Exit(code)

    @app.command("rules", help="List every rule: id, title, fix kind, file kinds.")
    def rules_cmd(
        fmt: str = typer.Option("text", "--format", help="text, markdown or json."),
    ) -> None:
        import json

        from migrator.engine import RuleSelection

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
        from migrator.engine import RuleSelection

        wanted = rule_id.strip().upper()
        for rule in RuleSelection(rule_loader()).load_all():
            if rule.id == wanted:
                typer.echo(explain_output(rule.doc()), nl=False)
                return
        raise _fail(f"unknown rule {rule_id!r}; `neuron-migrate rules` lists them")

    @app.command(
        "verify",
        help="Run a migrated script (or notebook) and its original (--against PATH|REV, the old stack emulated "
             "on CPU) and compare their outputs.",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": False},
    )
    def verify_cmd(
        ctx: typer.Context,
        script: Path = typer.Argument(..., help="The script to run."),
        device: str = typer.Option("auto", "--device", help="auto, neuron, cpu, emulate or cuda."),
        reference: str = typer.Option("cpu", "--reference", help="cpu or none."),
        against: Optional[str] = typer.Option(
            None, "--against", help="The original: a path, or a git revision (HEAD, main~1). Default: HEAD when "
                                    "the script differs from it in a git work tree."),
        original_python: Optional[str] = typer.Option(
            None, "--original-python", help="Interpreter for the original (e.g. its old virtual environment)."),
        original_env: Optional[str] = typer.Option(
            None, "--original-env", metavar="auto|PATH",
            help="The original's libraries: auto builds (once, cached) an environment with the Hugging Face "
                 "library versions its project pins (else the last of the old era), reusing this torch; PATH: a "
                 "prepared virtual environment or interpreter."),
        original_env_allow_all: bool = typer.Option(
            False, "--original-env-allow-all",
            help="--original-env auto also installs the refused lines (URLs, VCS, paths, index options, other "
                 "packages) as written."),
        original_nproc: Optional[int] = typer.Option(
            None, "--original-nproc", min=1,
            help="Processes of the original (default --nproc): 1 for an optimum-neuron script whose num_cores "
                 "became tp_size."),
        original_cache: Optional[Path] = typer.Option(
            None, "--original-cache", help="Folder caching the original's observations (reused while the "
                                           "original, its arguments and interpreter are unchanged)."),
        before: Optional[List[str]] = typer.Option(
            None, "--before", metavar="\"SCRIPT [ARGS...]\"",
            help="Run this step of the project first, on each side, in its scratch directory (repeatable, in "
                 "order): e.g. the script that writes the artifact the verified script loads."),
        keep_scratch: bool = typer.Option(False, "--keep-scratch",
                                          help="Keep the scratch working directories of --against."),
        baseline: Optional[Path] = typer.Option(None, "--baseline", help="Golden file to compare with."),
        record: Optional[Path] = typer.Option(None, "--record", help="Write the observations as a golden file."),
        nproc: int = typer.Option(1, "--nproc", min=1, help="Processes (torchrun) for distributed scripts."),
        atol: float = typer.Option(1e-5, "--atol"),
        rtol: float = typer.Option(1e-4, "--rtol"),
        max_recompiles: int = typer.Option(0, "--max-recompiles", min=0),
        timeout: float = typer.Option(1800.0, "--timeout", help="Seconds before the run is killed."),
        fmt: str = typer.Option("text", "--format", help="text or json."),
        output: Optional[Path] = typer.Option(None, "--output"),
        allow_dtype_change: bool = typer.Option(
            False, "--allow-dtype-change",
            help="A dtype that differs from the reference's (bf16 vs fp32) is intended: compare the values only."),
        seed: int = typer.Option(0, "--seed", help="Both sides start with random, NumPy and torch seeded with this."),
        no_seed: bool = typer.Option(False, "--no-seed", help="Do not seed: the script's own randomness."),
        dropout: str = typer.Option(
            "auto", "--dropout",
            help="auto (disabled on both sides when the migrated run is on a real device, whose generator no CPU "
                 "run reproduces), on or off."),
    ) -> None:
        from migrator.verify import Options, run_verify

        # typer may vendor its own click: compare the ParameterSource by name
        source = getattr(ctx.get_parameter_source("reference"), "name", None)
        opts = Options(
            script=script, script_args=list(ctx.args), device=device, reference=reference,
            reference_explicit=source not in (None, "DEFAULT", "DEFAULT_MAP"),
            baseline=baseline, record=record, nproc=nproc, atol=atol, rtol=rtol,
            max_recompiles=max_recompiles, timeout=timeout, fmt=fmt, output=output,
            against=against, original_python=original_python, original_nproc=original_nproc,
            original_env=original_env, original_env_allow_all=original_env_allow_all,
            keep_scratch=keep_scratch, original_cache=original_cache, allow_dtype_change=allow_dtype_change,
            before=list(before or []), seed=None if no_seed else seed, dropout=dropout,
        )
        code, _report = run_verify(opts, out=sys.stdout, err=sys.stderr)
        raise typer.Exit(code)

    return app


# --------------------------------------------------------------------------- the fast path

# the migrate options of the contract: flags (name -> (keyword, value)) and options with a value
_FLAGS = {
    "--write": ("write", True),
    "--check": ("check", True),
    "--diff": ("diff", True),
    "--no-diff": ("diff", False),
    "--allow-dirty": ("allow_dirty", True),
    "--no-progress": ("no_progress", True),
}
_VALUED = {"--format": "fmt", "--output": "output", "--jobs": "jobs", "--docs-url": "docs_url"}  # the last one wins
_REPEATED = {"--select": "select", "--ignore": "ignore", "--exclude": "exclude"}  # each one counts


def _plain(value: str) -> bool:
    """An option value or path both parsers surely read alike: :func:`_text`, no leading dash."""
    return _text(value) and value[0] != "-"


def _text(value: str) -> bool:
    """Not empty, and valid UTF-8 text (no surrogate-escaped bytes of a non-UTF-8 name)."""
    if not value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_migrate_argv(args: Sequence[str]) -> dict | None:
    """The keyword arguments of :func:`run_migrate` for ``neuron-migrate ARGS``, or None.

    Strict on purpose: None (= let the typer app parse it, with its errors and help) for anything
    but well-formed migrate options (``--opt VALUE`` or ``--opt=VALUE``, flags without a value) and
    at least one path; ``--`` ends the options. A first argument that is a subcommand name or
    starts with ``-h``/``--help``/``--version`` is the typer app's too.
    """
    if not args or args[0] in SUBCOMMANDS:
        return None
    kw: dict = {}
    paths: list[Path] = []
    i, n = 0, len(args)
    while i < n:
        arg = args[i]
        i += 1
        if arg == "--":
            for rest in args[i:]:  # all paths, even one that starts with a dash
                if not _text(rest):
                    return None
                paths.append(Path(rest))
            break
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            if name in _FLAGS:
                if eq:
                    return None
                key, flag = _FLAGS[name]
                kw[key] = flag
                continue
            if name not in _VALUED and name not in _REPEATED:
                return None  # -h, --help, --version, a typo, a short option: typer's
            if not eq:
                if i >= n:
                    return None
                value = args[i]
                i += 1
            if not _plain(value):
                return None
            if name in _REPEATED:
                kw.setdefault(_REPEATED[name], []).append(value)
            elif name == "--format":
                if value not in FORMATS:
                    return None
                kw["fmt"] = value
            elif name == "--jobs":
                if not (value.isascii() and value.isdigit()) or int(value) < 1:
                    return None
                kw["jobs"] = int(value)
            elif name == "--docs-url":
                kw["docs_url"] = value
            else:
                kw["output"] = Path(value)
            continue
        if not _plain(arg) and arg != "-":
            return None
        paths.append(Path(arg))
    if not paths:
        return None
    kw["paths"] = paths
    return kw


def _echo_err(message: str) -> None:
    """``typer.echo(message, err=True)`` as typer (click) does it for our messages."""
    if "\x1b" in message and not _isatty(sys.stderr):  # click strips ANSI codes off a non-terminal
        import re

        message = re.sub(r"\033\[[;?0-9]*[a-zA-Z]", "", message)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except Exception:
        return False


class _PacifyFlush:
    """click's PacifyFlushWrapper: a flush into a closed pipe is not an error."""

    def __init__(self, wrapped) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as exc:
            import errno

            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, attr):
        return getattr(self.wrapped, attr)


def _run_fast(kw: dict) -> int:
    """:func:`run_migrate` with what typer's standalone mode does around a command."""
    try:
        return run_migrate(**kw)
    except UsageError as exc:
        _echo_err(error_line(str(exc)))
        return 2
    except EOFError:
        _echo_err("")
        _echo_err("Aborted!")
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        import errno

        if exc.errno != errno.EPIPE:
            raise
        sys.stdout = _PacifyFlush(sys.stdout)
        sys.stderr = _PacifyFlush(sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not os.environ.get(NO_FASTPATH_ENV) and not os.environ.get(_COMPLETE_ENV):
        if args == ["--version"]:
            sys.stdout.write(f"neuron-migrate {__version__}\n")
            sys.stdout.flush()
            return 0
        kw = parse_migrate_argv(args)
        if kw is not None:
            return _run_fast(kw)
    app = _typer_app()
    try:
        app(args=args, prog_name="neuron-migrate", standalone_mode=True)
    except SystemExit as exc:  # typer/click exit
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return 0


def entry() -> None:
    sys.exit(main())


def __getattr__(name: str):
    if name in _LAZY:
        _import_run_modules()
        value = globals()[name] = getattr(sys.modules[_LAZY[name]], name)
        return value
    if name == "app":  # ``from migrator.cli import app``: the typer app
        return _typer_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":  # ``python -m migrator.cli`` runs the CLI as ``python -m migrator`` does
    entry()
