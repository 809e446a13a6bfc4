"""``[tool.neuron-migrate]`` in the nearest ``pyproject.toml``.

```toml
[tool.neuron-migrate]
select = ["NM1", "NM2"]        # or "NM1,NM2"
ignore = "NM901"
exclude = ["tests/fixtures", "legacy/**"]
jobs = 4
docs-url = "https://example.org/neuron-migrate/"   # where the docs site is published: reports link rule pages
```

Command-line options win over these (the CLI merges them).
"""

from __future__ import annotations

import os
try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Config", "ConfigError", "load_config", "TABLE"]

TABLE = "neuron-migrate"
_LIST_KEYS = ("select", "ignore", "exclude")
_KEYS = _LIST_KEYS + ("jobs", "docs-url")


@dataclass
class Config:
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    jobs: int | None = None
    #: the URL the docs site is published at (``docs-url``): the reports link each rule's page under it
    docs_url: str | None = None
    source: Path | None = None  # the pyproject.toml it came from


class ConfigError(Exception):
    """A ``pyproject.toml`` that cannot be used; the message names the file (and key)."""

    def __init__(self, message: str, path: Path | None = None, key: str | None = None):
        super().__init__(message)
        self.path = path
        self.key = key


def _string_list(value: object, path: Path, key: str) -> list[str]:
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = value
    else:
        raise ConfigError(
            f"{path}: [tool.{TABLE}] {key}: expected a list of strings or a comma-separated "
            f"string, got {_describe(value)}",
            path,
            key,
        )
    return [s.strip() for s in items if s.strip()]


def _describe(value: object) -> str:
    if isinstance(value, list):
        bad = next((v for v in value if not isinstance(v, str)), None)
        return f"a list containing {type(bad).__name__} {bad!r}"
    return f"{type(value).__name__} {value!r}"


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}", path) from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 ({e})", path) from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}", path) from e


def _parse_table(table: object, path: Path) -> Config:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.{TABLE}] must be a table, got {_describe(table)}", path, None)
    for key in table:
        if key not in _KEYS:
            raise ConfigError(
                f"{path}: [tool.{TABLE}] unknown key {key!r} (known: {', '.join(_KEYS)})", path, key
            )
    cfg = Config(source=path)
    if "select" in table:
        cfg.select = _string_list(table["select"], path, "select")
    if "ignore" in table:
        cfg.ignore = _string_list(table["ignore"], path, "ignore")
    if "exclude" in table:
        cfg.exclude = _string_list(table["exclude"], path, "exclude")
    if "jobs" in table:
        jobs = table["jobs"]
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ConfigError(
                f"{path}: [tool.{TABLE}] jobs: expected a positive integer, got {_describe(jobs)}",
                path,
                "jobs",
            )
        cfg.jobs = jobs
    if "docs-url" in table:
        url = table["docs-url"]
        if not isinstance(url, str) or not is_docs_url(url):
            raise ConfigError(
                f"{path}: [tool.{TABLE}] docs-url: expected an absolute URL (https://...), got {_describe(url)}",
                path,
                "docs-url",
            )
        cfg.docs_url = url
    return cfg


def is_docs_url(value: str) -> bool:
    """A usable ``docs-url`` / ``--docs-url``: an absolute URL (a scheme, then something)."""
    from migrator.ruledocs import is_absolute_url

    return is_absolute_url(value) and not any(c.isspace() for c in value)


def load_config(start: Path) -> Config:
    """The configuration for ``start`` (a file or directory).

    Looks at ``pyproject.toml`` in ``start``'s directory and each parent in turn,
    skipping files without a ``[tool.neuron-migrate]`` table, and stops after the
    git repository root (a directory holding ``.git``) or the filesystem root.
    Returns ``Config()`` (``source=None``) when no table is found. A
    ``pyproject.toml`` on the way that is not valid TOML raises :class:`ConfigError`.
    """
    start = Path(os.path.abspath(start))
    d = start if start.is_dir() else start.parent
    while True:
        candidate = d / "pyproject.toml"
        if candidate.is_file():
            data = _read_toml(candidate)
            tool = data.get("tool")
            if isinstance(tool, dict) and TABLE in tool:
                return _parse_table(tool[TABLE], candidate)
        if os.path.lexists(d / ".git") or d.parent == d:
            return Config()
        d = d.parent
