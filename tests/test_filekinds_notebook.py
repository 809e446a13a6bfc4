"""Notebook file kind: cells, IPython syntax, byte-faithful reassembly."""

from __future__ import annotations

from migrator.model import Finding
from tests.fake_runner import SHELL_MARKER, Recorder


# ---------------------------------------------------------------------------------------------
import json

import pytest

from migrator.filekinds.notebook import NotebookError, transform_notebook


def jupyter_dumps(nb: dict) -> str:
    """What Jupyter / nbformat writes."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def code(src: str, **extra) -> dict:
    cell = {
        "cell_type": "code",
        "execution_count": extra.pop("execution_count", None),
        "id": extra.pop("id", "c0ffee"),
        "metadata": extra.pop("metadata", {}),
        "outputs": extra.pop("outputs", []),
        "source": lines(src),
    }
    cell.update(extra)
    return cell


def markdown_cell(src: str) -> dict:
    return {"cell_type": "markdown", "id": "md1", "metadata": {}, "source": lines(src)}


def notebook(cells: list[dict]) -> dict:
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "version": "3.10.12"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def realistic() -> dict:
    return notebook(
        [
            markdown_cell("# Inférence sur Trainium ✨\n\nDéployer `optimum.neuron` — vite."),
            code("%matplotlib inline\nimport torch", execution_count=1, id="a1"),
            code(
                "from optimum.neuron import NeuronModelForCausalLM\n"
                "model = NeuronModelForCausalLM.from_pretrained('x')  # modèle ✓",
                execution_count=2,
                id="b2",
                outputs=[
                    {"name": "stdout", "output_type": "stream", "text": ["chargé ✓\n", "done"]},
                    {
                        "data": {"image/png": "iVBORw0KGgo=\n", "text/plain": ["<Figure>"]},
                        "execution_count": 2,
                        "metadata": {"needs_background": "light"},
                        "output_type": "execute_result",
                    },
                ],
                metadata={"tags": ["parameters"], "collapsed": False},
            ),
            code("print('héllo')", execution_count=3, id="c3"),
        ]
    )


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def run(text: str, rec: Recorder):
    return transform_notebook(text, rec.run_python, rec.run_shell)


def run_cells(cells: list[dict], rec: Recorder):
    """Migrate a notebook of these cells, as Jupyter writes it."""
    return run(jupyter_dumps(notebook(cells)), rec)


# --------------------------------------------------------------------------- untouched


def test_untouched_notebook_is_the_same_object(rec):
    nb = realistic()
    nb["cells"][2]["source"] = lines("import torch\nx = 1")
    text = jupyter_dumps(nb)
    new, findings = run(text, rec)
    assert new is text
    assert findings == []
    assert rec.python_calls  # the cells were looked at


def test_untouched_oddly_formatted_notebook_is_identical(rec):
    text = '{"cells": [{"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": []}],\n "metadata": {}, "nbformat": 4, "nbformat_minor": 2}'
    new, findings = run(text, rec)
    assert new is text and findings == []


# --------------------------------------------------------------------------- one cell changes


def test_jupyter_notebook_one_cell_changes_byte_exact(rec):
    nb = realistic()
    text = jupyter_dumps(nb)
    new, findings = run(text, rec)
    assert new != text

    expected = realistic()
    expected["cells"][2]["source"] = lines(
        "from transformers import NeuronModelForCausalLM\n"
        "model = NeuronModelForCausalLM.from_pretrained('x')  # modèle ✓"
    )
    # exactly what Jupyter would write for the migrated notebook
    assert new == jupyter_dumps(expected)
    assert json.loads(new) == expected
    # non-ASCII stays literal
    assert "✓" in new and "\\u2713" not in new

    # everything outside the changed cell's "source" is byte-identical
    start = text.index('"source": [\n    "from optimum.neuron')
    end = text.index("]", start) + 1
    new_end = new.index("]", start) + 1
    assert text[:start] == new[:start]
    assert text[end:] == new[new_end:]

    assert findings == [
        Finding(line=1, column=6, rule="NM101", message="optimum.neuron -> transformers", cell=2)
    ]


def test_idempotent(rec):
    text = jupyter_dumps(realistic())
    once, _ = run(text, rec)
    twice, findings = run(once, rec)
    assert twice is once
    assert findings == []


def test_unusual_formatting_untouched_parts_identical(rec):
    # indent=2, ASCII escapes, no trailing newline, keys not sorted, one source is a string
    nb = {
        "nbformat": 4,
        "nbformat_minor": 4,
        "metadata": {"title": "caf\u00e9"},
        "cells": [
            {"source": ["# caf\u00e9\n", "import optimum.neuron\n", "y = 2"], "cell_type": "code",
             "outputs": [], "metadata": {}, "execution_count": None},
            {"cell_type": "code", "source": "print('\u00e9t\u00e9')", "outputs": [], "metadata": {},
             "execution_count": 7},
        ],
    }
    text = json.dumps(nb, indent=2, ensure_ascii=True)
    assert "\\u00e9" in text and not text.endswith("\n")
    new, findings = run(text, rec)
    assert not new.endswith("\n")
    assert "\\u00e9" in new and "é" not in new
    expected = json.loads(text)
    expected["cells"][0]["source"][1] = "import transformers\n"
    assert json.loads(new) == expected
    assert new == json.dumps(expected, indent=2, ensure_ascii=True)
    assert findings[0].cell == 0 and findings[0].line == 2


def test_sources_as_strings(rec):
    nb = notebook(
        [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": "import os\nfrom optimum.neuron import pipeline\n"},
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": "x = 1"},
        ]
    )
    text = jupyter_dumps(nb)
    new, findings = run(text, rec)
    data = json.loads(new)
    assert data["cells"][0]["source"] == "import os\nfrom transformers import pipeline\n"
    assert data["cells"][1]["source"] == "x = 1"
    nb["cells"][0]["source"] = "import os\nfrom transformers import pipeline\n"
    assert new == jupyter_dumps(nb)
    assert [(f.cell, f.line) for f in findings] == [(0, 2)]


def test_changed_line_count_and_empty_source_list(rec):
    # a cell whose source list was empty stays so; a changed cell may change its line count
    def grow(source):
        if "optimum.neuron" in source:
            return source.replace("import optimum.neuron", "import torch\nimport transformers"), []
        return source, []

    nb = notebook([code(""), code("import optimum.neuron\nx = 1")])
    nb["cells"][0]["source"] = []
    text = jupyter_dumps(nb)
    new, _ = transform_notebook(text, grow, rec.run_shell)
    nb["cells"][1]["source"] = lines("import torch\nimport transformers\nx = 1")
    assert new == jupyter_dumps(nb)


# --------------------------------------------------------------------------- IPython syntax


def test_bang_lines_go_to_shell_and_keep_the_bang(rec):
    src = (
        "!pip install optimum-neuron\n"
        "import optimum.neuron\n"
        "files = !ls optimum-neuron/\n"
        "for i in range(2):\n"
        "    !echo optimum-neuron\n"
        "print(files)"
    )
    text = jupyter_dumps(notebook([code(src)]))
    new, findings = run(text, rec)
    assert "".join(json.loads(new)["cells"][0]["source"]) == (
        "!pip install transformers\n"
        "import transformers\n"
        "files = !ls transformers/\n"
        "for i in range(2):\n"
        "    !echo transformers\n"
        "print(files)"
    )
    assert "pip install optimum-neuron\n" in rec.shell_calls
    assert "ls optimum-neuron/\n" in rec.shell_calls
    assert "echo optimum-neuron\n" in rec.shell_calls
    # the Python rules never saw IPython syntax
    assert all("!" not in call for call in rec.python_calls)
    got = sorted((f.rule, f.line, f.column) for f in findings)
    assert got == [
        ("NM101", 2, 8),
        ("NM501", 1, 14),  # "!pip install " is 13 characters
        ("NM501", 3, 13),  # "files = !ls " is 12 characters
        ("NM501", 5, 11),  # "    !echo "
    ]
    assert {f.cell for f in findings} == {0}


def test_bang_line_continuation_is_one_shell_unit(rec):
    src = "!pip install \\\n    optimum-neuron \\\n    torch\nimport os"
    text = jupyter_dumps(notebook([code(src)]))
    new, findings = run(text, rec)
    assert rec.shell_calls == ["pip install \\\n    optimum-neuron \\\n    torch\n"]
    assert "".join(json.loads(new)["cells"][0]["source"]) == (
        "!pip install \\\n    transformers \\\n    torch\nimport os"
    )
    assert [(f.line, f.column) for f in findings] == [(2, 5)]


def test_shell_marker_above_bang_line_is_not_duplicated(rec):
    src = "import os\n!neuron_parallel_compile python train.py\nx = 1"
    text = jupyter_dumps(notebook([code(src)]))
    once, findings = run(text, rec)
    assert "".join(json.loads(once)["cells"][0]["source"]) == (
        "import os\n" + SHELL_MARKER + "\n!neuron_parallel_compile python train.py\nx = 1"
    )
    assert [(f.rule, f.line, f.column) for f in findings] == [("NM502", 2, 2)]
    twice, _ = run(once, rec)
    assert twice is once


def test_line_magics_survive_and_rest_is_migrated(rec):
    src = (
        "%matplotlib inline\n"
        "%time x = 1\n"
        "%load_ext autoreload\n"
        "from optimum.neuron import NeuronTrainer\n"
        "if x:\n"
        "    %time y = 2\n"
        "z = (1\n"
        "     % 2)"
    )
    text = jupyter_dumps(notebook([code(src)]))
    new, findings = run(text, rec)
    assert "".join(json.loads(new)["cells"][0]["source"]) == src.replace(
        "optimum.neuron", "transformers"
    )
    assert [(f.cell, f.line) for f in findings] == [(0, 4)]
    assert rec.shell_calls == []


def test_bash_cells_go_to_shell(rec):
    cells = [
        code("%%bash\npip install optimum-neuron\necho done"),
        code("%%script bash\npip install -U optimum-neuron"),
        code("%%sh\necho hi"),
    ]
    text = jupyter_dumps(notebook(cells))
    new, findings = run(text, rec)
    data = json.loads(new)
    assert "".join(data["cells"][0]["source"]) == "%%bash\npip install transformers\necho done"
    assert "".join(data["cells"][1]["source"]) == "%%script bash\npip install -U transformers"
    assert rec.shell_calls == [
        "pip install optimum-neuron\necho done",
        "pip install -U optimum-neuron",
        "echo hi",
    ]
    assert rec.python_calls == []
    assert [(f.cell, f.line, f.column) for f in findings] == [(0, 2, 13), (1, 2, 16)]


def test_other_cell_magics_are_left_alone(rec):
    cells = [
        code("%%writefile train.py\nfrom optimum.neuron import NeuronTrainer"),
        code("%%time\nfrom optimum.neuron import NeuronTrainer"),
    ]
    text = jupyter_dumps(notebook(cells))
    new, findings = run(text, rec)
    data = json.loads(new)
    assert "".join(data["cells"][0]["source"]) == "%%writefile train.py\nfrom optimum.neuron import NeuronTrainer"
    # %%time's body is Python: it is migrated, the magic line kept
    assert "".join(data["cells"][1]["source"]) == "%%time\nfrom transformers import NeuronTrainer"
    assert [(f.cell, f.line) for f in findings] == [(1, 2)]


# --------------------------------------------------------------------------- unparsable cells


def test_unparsable_cell_gives_finding_and_shell_lines_still_migrated(rec):
    cells = [
        code("import os"),
        code("!pip install optimum-neuron\nfrom optimum.neuron import (\nx = ]"),
        code("def broken(:\n    pass"),  # no neuron/xla: silently left alone
    ]
    text = jupyter_dumps(notebook(cells))
    new, findings = run(text, rec)
    data = json.loads(new)
    assert "".join(data["cells"][1]["source"]) == (
        "# TODO(neuron-migrate NM990): Migrate this cell by hand: it does not parse as Python.\n"
        "!pip install transformers\nfrom optimum.neuron import (\nx = ]"
    )
    assert data["cells"][2]["source"] == cells[2]["source"]
    manual = [f for f in findings if f.fix == "manual"]
    assert manual == [
        Finding(line=1, column=1, rule="NM990", fix="manual", cell=1,
                message="Migrate this cell by hand: it does not parse as Python.")
    ]
    assert [(f.rule, f.cell, f.line) for f in findings if f.fix == "applied"] == [("NM501", 1, 1)]
    # the marker is written once: a second run reports it and changes nothing
    again, findings = run(new, rec)
    assert again == new
    assert [f.rule for f in findings if f.fix == "manual"] == ["NM990"]


def test_skipped_rule_id_is_configurable(rec):
    text = jupyter_dumps(notebook([code("import torch_xla\nx = (")]))
    new, findings = transform_notebook(text, rec.run_python, rec.run_shell, skipped_rule="NM999")
    assert json.loads(new)["cells"][0]["source"][0].startswith("# TODO(neuron-migrate NM999): ")
    assert [(f.rule, f.cell, f.line, f.column, f.fix) for f in findings] == [("NM999", 0, 1, 1, "manual")]


def test_findings_carry_cell_index_among_all_cells(rec):
    cells = [
        markdown_cell("intro"),
        code("import os"),
        {"cell_type": "raw", "metadata": {}, "source": ["from optimum.neuron import x"]},
        code("x = 1\n\nfrom optimum.neuron import a\nimport optimum.neuron"),
    ]
    text = jupyter_dumps(notebook(cells))
    new, findings = run(text, rec)
    assert [(f.cell, f.line, f.column) for f in findings] == [(3, 3, 6), (3, 4, 8)]
    data = json.loads(new)
    assert data["cells"][2]["source"] == ["from optimum.neuron import x"]  # raw cell untouched


def test_non_python_notebook_is_left_alone(rec):
    nb = notebook([code("library(optimum.neuron)")])
    nb["metadata"]["kernelspec"]["language"] = "R"
    nb["metadata"]["language_info"]["name"] = "R"
    text = jupyter_dumps(nb)
    new, findings = run(text, rec)
    assert new is text and findings == []


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"cells": [', "invalid JSON"),
        ("", "invalid JSON"),
        ("[1, 2]", "not a notebook"),
        ('{"nbformat": 4}', "not a notebook"),
        ('{"worksheets": [], "nbformat": 3}', "nbformat 3"),
    ],
)
def test_not_a_notebook(rec, text, why):
    with pytest.raises(NotebookError) as info:
        run(text, rec)
    assert why in str(info.value)
    assert "\n" not in str(info.value)


def test_bom_is_kept(rec):
    text = "\ufeff" + jupyter_dumps(notebook([code("import optimum.neuron")]))
    new, _ = run(text, rec)
    assert new.startswith("\ufeff")
    assert json.loads(new[1:])["cells"][0]["source"] == ["import transformers"]


def test_magic_like_lines_inside_strings_and_expressions_are_python(rec):
    src = (
        's = """\n'
        "!not a command\n"
        "%not a magic\n"
        '"""\n'
        "t = (10\n"
        "     %3)\n"
        "timing = %timeit -o sum(range(3))\n"
        "import optimum.neuron"
    )
    text = jupyter_dumps(notebook([code(src)]))
    new, findings = run(text, rec)
    assert "".join(json.loads(new)["cells"][0]["source"]) == src.replace("optimum.neuron", "transformers")
    assert rec.shell_calls == []
    assert "!not a command" in rec.python_calls[0]
    assert "%timeit" not in rec.python_calls[0]
    assert [(f.line, f.column) for f in findings] == [(8, 8)]


def test_python_changes_dropped_when_a_placeholder_goes_missing(rec):
    def eats_placeholders(source):
        new = "\n".join(
            ln.replace("optimum.neuron", "transformers") for ln in source.split("\n") if "pass  #" not in ln
        )
        return new, [Finding(2, 8, "NM101", "x")]

    src = "%matplotlib inline\nimport optimum.neuron\n!pip install optimum-neuron"
    text = jupyter_dumps(notebook([code(src)]))
    new, findings = transform_notebook(text, eats_placeholders, rec.run_shell)
    # the Python edit could not be put together with the magics: only the shell edit is kept
    assert "".join(json.loads(new)["cells"][0]["source"]) == (
        "%matplotlib inline\nimport optimum.neuron\n!pip install transformers"
    )
    assert [(f.rule, f.line) for f in findings] == [("NM501", 3)]


def test_indented_placeholder_restores_inside_blocks(rec):
    src = "def f():\n    %time g()\n    !ls optimum-neuron\n    import optimum.neuron\n"
    text = jupyter_dumps(notebook([code(src)]))
    new, _ = run(text, rec)
    assert "".join(json.loads(new)["cells"][0]["source"]) == (
        "def f():\n    %time g()\n    !ls transformers\n    import transformers\n"
    )
    assert rec.python_calls == [
        "def f():\n    pass  # __nm_magic_0__\n    pass  # __nm_magic_1__\n    import optimum.neuron\n"
    ]


# --------------------------------------------------------------------------- one program


def test_python_cells_are_one_program(rec):
    cells = [
        code("import os"),
        markdown_cell("text"),
        code("%matplotlib inline\nx = 1\n"),
        code("%%bash\necho hi"),
        code("%%time\ny = 2"),
    ]
    run_cells(cells, rec)
    assert rec.python_calls == [
        "import os\n"
        "__nm_cell__(1)\n"
        "pass  # __nm_magic_0__\nx = 1\n"
        "__nm_cell__(2)\n"
        "pass  # __nm_magic_1__\ny = 2"
    ]


def test_findings_map_back_to_cell_and_line(rec):
    cells = [
        code("import os\nimport optimum.neuron"),
        markdown_cell("optimum.neuron"),
        code("%pip install optimum-neuron\nx = 1\n\ny = optimum.neuron.z"),
    ]
    new, findings = run_cells(cells, rec)
    assert [(f.rule, f.cell, f.line, f.column) for f in findings] == [
        ("NM101", 0, 2, 8),
        ("NM501", 2, 1, 14),  # "%pip install " is 13 characters
        ("NM101", 2, 4, 5),
    ]
    data = json.loads(new)
    assert "".join(data["cells"][2]["source"]) == "%pip install transformers\nx = 1\n\ny = transformers.z"


def test_unchanged_cells_stay_byte_identical():
    def touch_second_cell(source):  # a rule that edits one statement of the program
        return source.replace("b = 2", "b = 3"), [Finding(4, 1, "NM101", "x")]

    cells = [
        code("%env A=1\na = 1", id="x1"),
        code("b = 2\n", id="x2"),
        code("!ls\nc = 3  # ünïcode", id="x3"),
    ]
    text = jupyter_dumps(notebook(cells))
    new, findings = transform_notebook(text, touch_second_cell, Recorder().run_shell)
    expected = notebook(cells)
    expected["cells"][1]["source"] = ["b = 3\n"]
    assert new == jupyter_dumps(expected)
    assert [(f.cell, f.line) for f in findings] == [(1, 1)]


def test_lost_boundary_falls_back_to_cell_by_cell(rec):
    def drops_boundaries(source):
        kept = [ln for ln in source.split("\n") if not ln.startswith("__nm_cell__")]
        return rec.run_python("\n".join(kept))

    cells = [code("import optimum.neuron"), code("x = optimum.neuron.a")]
    text = jupyter_dumps(notebook(cells))
    new, findings = transform_notebook(text, drops_boundaries, rec.run_shell)
    # the program was tried once, then each cell on its own
    assert len(rec.python_calls) == 3
    assert rec.python_calls[1:] == ["import optimum.neuron", "x = optimum.neuron.a"]
    data = json.loads(new)
    assert [d["source"] for d in data["cells"]] == [["import transformers"], ["x = transformers.a"]]
    assert [(f.cell, f.line) for f in findings] == [(0, 1), (1, 1)]


def test_placeholder_moved_to_another_cell_falls_back(rec):
    def swaps_cells(source):
        if "__nm_cell__" not in source:
            return source, []
        first, second = source.split("__nm_cell__(1)\n")
        return second + "\n__nm_cell__(1)\n" + first.rstrip("\n"), []

    cells = [code("!ls\nimport os\n"), code("%time x = 1")]
    text = jupyter_dumps(notebook(cells))
    new, _ = transform_notebook(text, swaps_cells, rec.run_shell)
    assert new is text  # cell by cell, the fake moves nothing


def test_unparsable_cell_between_two_is_left_out_of_the_program(rec):
    cells = [
        code("import optimum.neuron"),
        code("!pip install optimum-neuron\nx = (optimum.neuron.a"),
        code("y = optimum.neuron.b"),
    ]
    new, findings = run_cells(cells, rec)
    # the program holds a stand-in that refers to the names the broken cell uses, so that no
    # rule removes an import that cell needs; no rule edits it
    assert rec.python_calls[0] == (
        "import optimum.neuron\n"
        "__nm_cell__(1)\n"
        "__nm_skipped__(pip, install, optimum, neuron, x, optimum.neuron.a)  # neuron-migrate: ignore\n"
        "__nm_cell__(2)\n"
        "y = optimum.neuron.b"
    )
    data = json.loads(new)
    assert [("".join(c["source"])) for c in data["cells"]] == [
        "import transformers",
        # its shell line is still migrated; a marker says the rest is a person's
        "# TODO(neuron-migrate NM990): Migrate this cell by hand: it does not parse as Python.\n"
        "!pip install transformers\nx = (optimum.neuron.a",
        "y = transformers.b",
    ]
    assert [(f.rule, f.cell, f.line) for f in findings] == [
        ("NM101", 0, 1), ("NM990", 1, 1), ("NM501", 1, 1), ("NM101", 2, 1),
    ]


def test_cell_that_looks_like_a_boundary_is_migrated_alone(rec):
    cells = [code("import optimum.neuron"), code("__nm_cell__(1)\nx = optimum.neuron.a")]
    new, findings = run_cells(cells, rec)
    assert rec.python_calls == ["import optimum.neuron", "__nm_cell__(1)\nx = optimum.neuron.a"]
    assert [(f.cell, f.line) for f in findings] == [(0, 1), (1, 2)]


def test_one_program_is_idempotent(rec):
    cells = [
        code("%pip install optimum-neuron\n!neuron_parallel_compile python train.py"),
        code("import optimum.neuron"),
        code("x = (optimum"),
        code("%%writefile train.py\nimport optimum.neuron\n"),
        code("y = optimum.neuron.b"),
    ]
    once, _ = transform_notebook(jupyter_dumps(notebook(cells)), rec.run_python, rec.run_shell,
                                 run_kind=lambda text, kind, name: rec.run_python(text))
    twice, _ = transform_notebook(once, rec.run_python, rec.run_shell,
                                  run_kind=lambda text, kind, name: rec.run_python(text))
    assert twice is once


def test_new_imports_go_after_the_leading_import_cells():
    # the fix-up puts imports no old import stands for after the module's import header; in a
    # notebook's program, placeholders (`pass`) and cell boundaries do not end that header
    import libcst as cst

    from migrator.imports import index_imports

    def header_end(source: str) -> str | None:
        module = cst.parse_module(source)
        end = index_imports(module).header_end
        return None if end is None else module.code_for_node(end).strip()

    assert header_end("pass  # __nm_magic_0__\n__nm_cell__(1)\nimport os\n__nm_cell__(2)\nx = 1\n") == "import os"
    assert header_end("pass  # __nm_magic_0__\n__nm_cell__(1)\nx = 1\n") == "__nm_cell__(1)"
    assert header_end("import os\n__nm_cell__(1)\nx = 1\nimport sys\n") == "import os"
    assert header_end("x = 1\nimport os\n") is None


# --------------------------------------------------------------------------- %pip and %%writefile


def test_pip_magic_goes_to_shell_and_keeps_the_percent(rec):
    src = "%pip install -U optimum-neuron\nimport os\nif os:\n    %pip install optimum-neuron"
    new, findings = run(jupyter_dumps(notebook([code(src)])), rec)
    assert "".join(json.loads(new)["cells"][0]["source"]) == (
        "%pip install -U transformers\nimport os\nif os:\n    %pip install transformers"
    )
    assert rec.shell_calls == ["pip install -U optimum-neuron\n", "pip install optimum-neuron\n"]
    assert [(f.rule, f.line, f.column) for f in findings] == [("NM501", 1, 17), ("NM501", 4, 18)]


def test_pip_magic_split_into_commands_keeps_percent_only_before_pip():
    def split(source):
        return "pip install transformers\nexport X=1\npip install accelerate\n", []

    text = jupyter_dumps(notebook([code("%pip install optimum-neuron")]))
    new, _ = transform_notebook(text, Recorder().run_python, split)
    assert "".join(json.loads(new)["cells"][0]["source"]) == (
        "%pip install transformers\n!export X=1\n%pip install accelerate"
    )


def test_other_line_magics_stay_out_of_the_shell_rules(rec):
    src = "%pipe optimum-neuron\n%env X=optimum-neuron\n%conda install optimum-neuron"
    new, _ = run(jupyter_dumps(notebook([code(src)])), rec)
    assert rec.shell_calls == []


def test_writefile_cells_are_files_of_their_kind(rec):
    calls = []

    def run_kind(text, kind, name):
        calls.append((kind, name))
        if kind == "python":
            return rec.run_python(text)
        return rec.run_shell(text)

    cells = [
        code("%%writefile train.py\nimport optimum.neuron\n"),
        code("%%writefile -a 'deps/requirements-dev.txt'\noptimum-neuron\n"),
        code("%%writefile run.sh\npip install optimum-neuron"),
        code("%%writefile Dockerfile\nRUN pip install optimum-neuron\n"),
        code("%%writefile notes.ipynb\n{}\n"),  # not migrated: another notebook
        code("%%writefile data.csv\noptimum-neuron\n"),  # not a kind the tool handles
        code("%%writefile\n"),
        code("import os"),
    ]
    text = jupyter_dumps(notebook(cells))
    new, findings = transform_notebook(text, rec.run_python, rec.run_shell, run_kind=run_kind)
    assert calls == [
        ("python", "train.py"),
        ("requirements", "deps/requirements-dev.txt"),
        ("shell", "run.sh"),
        ("dockerfile", "Dockerfile"),
    ]
    data = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert data[:6] == [
        "%%writefile train.py\nimport transformers\n",
        "%%writefile -a 'deps/requirements-dev.txt'\ntransformers\n",
        "%%writefile run.sh\npip install transformers",
        "%%writefile Dockerfile\nRUN pip install transformers\n",
        "%%writefile notes.ipynb\n{}\n",
        "%%writefile data.csv\noptimum-neuron\n",
    ]
    # a written .py file is a module of its own, not part of the notebook's program
    assert rec.python_calls == ["import os", "import optimum.neuron\n"]
    assert [(f.cell, f.line, f.column) for f in findings] == [(0, 2, 8), (1, 2, 1), (2, 2, 13), (3, 2, 17)]


def test_writefile_python_that_does_not_parse_is_reported(rec):
    cells = [code("%%writefile train.py\nimport torch_xla\nx = (\n")]
    text = jupyter_dumps(notebook(cells))
    new, findings = transform_notebook(
        text, rec.run_python, rec.run_shell, run_kind=lambda t, kind, name: rec.run_python(t)
    )
    assert "".join(json.loads(new)["cells"][0]["source"]) == (
        "%%writefile train.py\n# TODO(neuron-migrate NM990): Migrate this cell by hand: it does not parse as Python.\n"
        "import torch_xla\nx = (\n")
    assert [(f.rule, f.cell, f.line) for f in findings] == [("NM990", 0, 2)]


def test_unparsable_cell_with_the_old_stack_only_in_comments_and_shell_lines_is_not_reported(rec):
    # an indented cell (IPython removes the first line's indentation; Python does not)
    cells = [code(" # upgrade neuronx-cc\n !pip install -U neuronx-cc\n !neuronx-cc --version")]
    new, findings = run_cells(cells, rec)
    assert [f.rule for f in findings] == []
