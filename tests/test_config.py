from __future__ import annotations

from pathlib import Path

import pytest

from migrator.config import Config, ConfigError, load_config


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    return root


def test_found_from_nested_dir_and_file(repo: Path) -> None:
    src = write(
        repo / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.neuron-migrate]\nselect = ["NM1", "NM2"]\nignore = ["NM901"]\n'
        'exclude = ["tests/fixtures", "legacy/**"]\njobs = 4\n',
    )
    deep = repo / "pkg" / "sub"
    deep.mkdir(parents=True)
    (deep / "mod.py").write_text("")
    expected = Config(select=["NM1", "NM2"], ignore=["NM901"], exclude=["tests/fixtures", "legacy/**"], jobs=4, source=src)
    assert load_config(deep) == expected
    assert load_config(deep / "mod.py") == expected
    assert load_config(repo) == expected


def test_comma_string_and_list_are_equivalent(repo: Path) -> None:
    write(repo / "pyproject.toml", '[tool.neuron-migrate]\nselect = "NM1, NM203 ,"\nignore = "NM9"\nexclude = ["a", "b/**"]\n')
    cfg = load_config(repo)
    assert cfg.select == ["NM1", "NM203"]
    assert cfg.ignore == ["NM9"]
    assert cfg.exclude == ["a", "b/**"]
    write(repo / "pyproject.toml", '[tool.neuron-migrate]\nselect = ["NM1", "NM203"]\nignore = ["NM9"]\nexclude = "a,b/**"\n')
    cfg2 = load_config(repo)
    assert (cfg2.select, cfg2.ignore, cfg2.exclude) == (cfg.select, cfg.ignore, cfg.exclude)


def test_defaults_when_keys_absent(repo: Path) -> None:
    src = write(repo / "pyproject.toml", "[tool.neuron-migrate]\n")
    assert load_config(repo) == Config(source=src)


def test_no_config_anywhere(repo: Path) -> None:
    write(repo / "pyproject.toml", '[project]\nname = "x"\n')
    assert load_config(repo) == Config()


def test_skips_pyproject_without_table(repo: Path) -> None:
    top = write(repo / "pyproject.toml", "[tool.neuron-migrate]\njobs = 2\n")
    write(repo / "pkg" / "pyproject.toml", '[project]\nname = "pkg"\n[tool.ruff]\nline-length = 100\n')
    cfg = load_config(repo / "pkg")
    assert cfg.jobs == 2 and cfg.source == top


def test_nearest_table_wins(repo: Path) -> None:
    write(repo / "pyproject.toml", "[tool.neuron-migrate]\njobs = 2\n")
    inner = write(repo / "pkg" / "pyproject.toml", "[tool.neuron-migrate]\njobs = 3\n")
    cfg = load_config(repo / "pkg")
    assert cfg.jobs == 3 and cfg.source == inner


def test_stops_at_repo_root(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.neuron-migrate]\njobs = 7\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    assert load_config(repo / "pkg") == Config()


def test_walks_to_fs_root_without_repo(tmp_path: Path) -> None:
    top = write(tmp_path / "pyproject.toml", "[tool.neuron-migrate]\njobs = 7\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert load_config(tmp_path / "a" / "b").source == top


def test_unknown_key(repo: Path) -> None:
    src = write(repo / "pyproject.toml", '[tool.neuron-migrate]\nselect = ["NM1"]\nexlcude = ["x"]\n')
    with pytest.raises(ConfigError) as ei:
        load_config(repo)
    assert str(src) in str(ei.value) and "exlcude" in str(ei.value)
    assert ei.value.key == "exlcude" and ei.value.path == src


@pytest.mark.parametrize(
    "body, key",
    [
        ("select = 3", "select"),
        ('ignore = ["NM1", 2]', "ignore"),
        ("exclude = {a = 1}", "exclude"),
        ("jobs = 0", "jobs"),
        ("jobs = -1", "jobs"),
        ('jobs = "4"', "jobs"),
        ("jobs = true", "jobs"),
        ("jobs = 2.0", "jobs"),
    ],
)
def test_wrong_types(repo: Path, body: str, key: str) -> None:
    src = write(repo / "pyproject.toml", f"[tool.neuron-migrate]\n{body}\n")
    with pytest.raises(ConfigError) as ei:
        load_config(repo)
    assert str(src) in str(ei.value) and key in str(ei.value)
    assert ei.value.key == key


def test_table_not_a_table(repo: Path) -> None:
    write(repo / "pyproject.toml", '[tool]\nneuron-migrate = "yes"\n')
    with pytest.raises(ConfigError, match="must be a table"):
        load_config(repo)


def test_invalid_toml(repo: Path) -> None:
    src = write(repo / "pyproject.toml", "[tool.neuron-migrate\nselect = [\n")
    with pytest.raises(ConfigError) as ei:
        load_config(repo / "missing_subdir_is_fine")
    msg = str(ei.value)
    assert str(src) in msg and "invalid TOML" in msg
    assert "line 1" in msg  # the parser's own message is kept


def test_invalid_utf8(repo: Path) -> None:
    (repo / "pyproject.toml").write_bytes(b"[tool.neuron-migrate]\nselect = \"\xff\"\n")
    with pytest.raises(ConfigError, match="pyproject.toml"):
        load_config(repo)


def test_docs_url(repo: Path) -> None:
    write(repo / "pyproject.toml", '[tool.neuron-migrate]\ndocs-url = "https://docs.example.org/nm/"\n')
    assert load_config(repo).docs_url == "https://docs.example.org/nm/"
    for bad in ('"docs/rules"', '3', '"https://x y"', '"https:"'):
        write(repo / "pyproject.toml", f"[tool.neuron-migrate]\ndocs-url = {bad}\n")
        with pytest.raises(ConfigError, match="docs-url: expected an absolute URL") as info:
            load_config(repo)
        assert info.value.key == "docs-url"

