"""The self-check: each violation kind is caught, and the engine never hands back what an edit broke
(it completes the edit, or drops it with an NM991 marker); old-stack imports left behind are removed
or marked (NM992)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from migrator.engine import RuleSelection, RuleSet, migrate_text
from migrator.python_engine import run_python
from migrator.rules import Owners, PythonRule
from migrator.selfcheck.check import KEYWORD, OLD_STACK, UNDEFINED, UNRESOLVED, check_program, check_source, introduced


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def kinds(violations) -> list[tuple[str, str]]:
    return sorted((v.kind, v.name) for v in violations)


# ------------------------------------------------------------------ the checks


def test_undefined_names_are_scope_aware():
    found = check_source(_src("""
        import os

        def use_before_local_import():
            dist.all_reduce(1)
            import torch.distributed as dist

        def only_imported_elsewhere():
            torch._dynamo.config.automatic_dynamic_shapes = False

        def imports_torch():
            import torch

        class C:
            attr = os.sep

        try:
            import fancy
        except ImportError:
            fancy = None

        def deleted():
            x = 1
            del x
            return x
    """))
    names = {v.name for v in found if v.kind == UNDEFINED}
    assert names == {"dist", "torch", "x"}


def test_a_notebook_is_one_program():
    cells = ["import torch_xla.core.xla_model as xm\n", "device = xm.xla_device()\n", "print(device, undefined_here)\n"]
    found = check_program(cells, notebook=True)
    assert [(v.kind, v.name, v.part, v.line) for v in found if v.kind == UNDEFINED] == [
        (UNDEFINED, "undefined_here", 2, 1)]
    # the notebook's own globals are known
    assert not check_program(["display(1)\nget_ipython()\n"], notebook=True)


def test_old_stack_imports_unmarked_only():
    found = check_source(_src("""
        import torch_xla
        # TODO(neuron-migrate NM900): something to do about it
        import torch_xla.core.xla_model as xm
        import torch_neuronx
        from optimum.neuron import NeuronTrainer  # neuron-migrate: ignore
        try:
            import torch_xla.runtime as xr
        except ImportError:
            xr = None
        xm, torch_neuronx
    """))
    assert kinds(found) == [(OLD_STACK, "torch_xla")]


def test_target_imports_that_do_not_resolve():
    found = check_source(_src("""
        from transformers import AdamW, AutoModelForCausalLM, is_torch_tpu_available
        from transformers.generation import SampleDecoderOnlyOutput
        import transformers.no_such_module
        import torch.distributed
        try:
            from transformers import OldThing
        except ImportError:
            OldThing = None
    """))
    assert kinds(v for v in found if v.kind == UNRESOLVED) == [
        (UNRESOLVED, "transformers.generation:SampleDecoderOnlyOutput"),
        (UNRESOLVED, "transformers.no_such_module"),
        (UNRESOLVED, "transformers:AdamW"),
        (UNRESOLVED, "transformers:is_torch_tpu_available"),
    ]


def test_keywords_the_target_does_not_accept():
    found = check_source(_src("""
        from transformers import AutoModelForCausalLM, TrainingArguments
        from sentence_transformers import SentenceTransformer

        shapes = {"batch_size": 1, "sequence_length": 128}
        model = AutoModelForCausalLM.from_pretrained("m", export=True, num_labels=2, dtype="auto", **shapes)
        args = TrainingArguments(output_dir="o", evaluation_strategy="steps", eval_strategy="steps")
        encoder = SentenceTransformer("m", subfolder="x", device="cpu")
        other = AutoModelForCausalLM.from_pretrained("m", **unknown)
    """))
    assert kinds(v for v in found if v.kind == KEYWORD) == [
        (KEYWORD, "sentence_transformers.SentenceTransformer(subfolder=)"),
        (KEYWORD, "transformers.AutoModelForCausalLM.from_pretrained(batch_size=)"),
        (KEYWORD, "transformers.AutoModelForCausalLM.from_pretrained(export=)"),
        (KEYWORD, "transformers.AutoModelForCausalLM.from_pretrained(sequence_length=)"),
        (KEYWORD, "transformers.TrainingArguments(evaluation_strategy=)"),
    ]


def test_introduced_compares_by_name_not_line():
    before = check_source("x = undefined_a\n")
    after = check_source("\n\ny = undefined_a + undefined_a\nz = undefined_b\n")
    assert [v.name for v in introduced(before, after)] == ["undefined_b"]


# ------------------------------------------------------------------ the engine's policy


class _ReplacesOldApi(PythonRule):
    """A test rule: every call ``old_api()`` becomes ``self.emitted`` (an expression whose names the
    rule does not import)."""

    title = "test"
    triggers = ("old_api",)
    emitted = ""

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node, ctx):
        if isinstance(node.func, cst.Name) and node.func.value == "old_api":
            ctx.replace(node, cst.parse_expression(self.emitted))
            ctx.finding(node, f"old_api() -> {self.emitted}")


class _Breaks(_ReplacesOldApi):
    """Uses a name nothing binds."""

    id = "NM998"
    emitted = "missing_name()"


class _UsesTorch(_ReplacesOldApi):
    """Uses ``torch``, which the module imports only in another function."""

    id = "NM997"
    emitted = "torch.ones(1)"


def _run(source: str, *rules: PythonRule):
    return run_python(_src(source), list(rules), Owners(list(rules)))


def test_an_edit_that_leaves_a_name_undefined_is_dropped_with_a_marker():
    new, findings = _run("""
        def f():
            a = old_api()
            b = old_api()
            return a, b
    """, _Breaks())
    assert new == _src("""
        def f():
            # TODO(neuron-migrate NM991): Migrate this by hand: NM998's rewrite would leave `missing_name` undefined.
            a = old_api()
            # TODO(neuron-migrate NM991): Migrate this by hand: NM998's rewrite would leave `missing_name` undefined.
            b = old_api()
            return a, b
    """)
    assert [(f.rule, f.fix, f.line) for f in findings] == [("NM991", "manual", 2), ("NM991", "manual", 3)]
    # idempotent: the markers are not added twice
    again, _ = run_python(new, [_Breaks()], Owners([_Breaks()]))
    assert again == new


def test_only_the_breaking_edits_are_dropped():
    class _Good(PythonRule):
        id = "NM996"
        title = "test"
        triggers = ("keep_me",)

        def handlers(self):
            return {cst.Name: self._on_name}

        def _on_name(self, node, ctx):
            if node.value == "keep_me":
                ctx.replace(node, cst.Name("kept"))

    new, _ = _run("""
        kept = 1
        x = keep_me
        y = old_api()
    """, _Breaks(), _Good())
    assert "x = kept" in new and "y = old_api()" in new and "NM991" in new


def test_a_function_local_import_is_not_hoisted_for_a_name_left_undefined():
    """An import another function makes stays local to it: hoisting it to the top of the module would make the
    module import what only that function needed (a module that imports without torch would not any more);
    the edit that needs the name is left out with an NM991 marker instead."""
    new, findings = _run("""
        def other():
            import torch
            return torch

        def main():
            return old_api()
    """, _UsesTorch())
    assert new == _src("""
        def other():
            import torch
            return torch

        def main():
            # TODO(neuron-migrate NM991): Migrate this by hand: NM997's rewrite would leave `torch` undefined.
            return old_api()
    """)
    assert [f.rule for f in findings] == ["NM991"]


def test_unused_old_stack_import_is_removed_and_used_one_marked():
    rules = RuleSet.from_selection(RuleSelection())
    new, findings = migrate_text(_src("""
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.utils.utils as xu

        device = xm.xla_device()
        print(xu.get_free_tcp_ports())
    """), "python", rules)
    assert "import torch_xla\n" not in new
    assert "import torch_xla.core.xla_model as xm" not in new
    assert "NM992" in new.splitlines()[new.splitlines().index("import torch_xla.utils.utils as xu") - 1]
    assert [(f.rule, f.fix) for f in findings if f.rule == "NM992"] == [("NM992", "manual")]
    again, _ = migrate_text(new, "python", rules)
    assert again == new


def test_an_import_whose_uses_are_all_marked_only_asks_to_be_removed_after_them():
    """One marker per cause: where every use of the import carries its own marker, the import's marker
    does not repeat them; a use nothing marks keeps the 'replace' marker."""
    rules = RuleSet.from_selection(RuleSelection())
    marked, _ = migrate_text(_src("""
        import torch_xla.utils.utils as xu

        ports = xu.get_free_tcp_ports()
    """), "python", rules)
    lines = marked.splitlines()
    assert lines[0] == "# TODO(neuron-migrate NM992): Remove this import once the TODOs on `xu` below are done."
    assert "NM900" in lines[lines.index("ports = xu.get_free_tcp_ports()") - 1]
    without_nm900 = RuleSet.from_selection(RuleSelection(ignore=("NM900",)))  # nothing marks the use then
    unmarked, _ = migrate_text(_src("""
        import torch_xla.utils.utils as xu

        helpers = [xu]
    """), "python", without_nm900)
    assert unmarked.splitlines()[0] == ("# TODO(neuron-migrate NM992): Replace `xu` below with native code, "
                                        "then remove this import.")
    assert not any("TODO" in ln for ln in unmarked.splitlines()[1:])
    assert migrate_text(marked, "python", rules)[0] == marked
    assert migrate_text(unmarked, "python", without_nm900)[0] == unmarked


def test_an_import_read_only_by_string_annotations_is_kept_and_judged_per_statement():
    """A type-checking import read only in string annotations (`x: "Model"`, `List["Model"]`) is used: it is
    marked, never removed (the annotation's name was left undefined). Each import statement is judged by its
    own uses: the function's own import, whose uses are all marked, only asks to be removed after them."""
    rules = RuleSet.from_selection(RuleSelection())
    source = _src("""
        from typing import TYPE_CHECKING, List

        import torch

        if TYPE_CHECKING:
            from neuronx_distributed.pipeline import NxDPPModel


        def stages(model: "torch.nn.Module | NxDPPModel", more: List["NxDPPModel"]) -> "NxDPPModel":
            from neuronx_distributed.pipeline import NxDPPModel

            if isinstance(model, NxDPPModel):
                return model.local_stage_modules
            return [model]
    """)
    new, _ = migrate_text(source, "python", rules)
    assert new.count("from neuronx_distributed.pipeline import NxDPPModel") == 2
    assert not [v for v in check_source(new) if v.kind == UNDEFINED]
    lines = new.splitlines()
    top = lines.index("    from neuronx_distributed.pipeline import NxDPPModel")
    assert lines[top - 1] == ("    # TODO(neuron-migrate NM992): Replace `NxDPPModel` below with native code, "
                              "then remove this import.")
    inner = lines.index("    from neuronx_distributed.pipeline import NxDPPModel", top + 1)
    assert lines[inner - 1] == ("    # TODO(neuron-migrate NM992): Remove this import once the TODOs on `NxDPPModel` "
                                "below are done.")
    assert migrate_text(new, "python", rules)[0] == new


def test_a_submodule_import_beside_its_package_is_judged_by_the_submodule_reads():
    """`import torch.neuron` binds `torch`, which `import torch` binds too: only reads of `torch.neuron` are its
    uses (not every `torch.cat`); the Inf1 call below keeps it, with one marker (NM900's, which the self-check
    does not repeat)."""
    rules = RuleSet.from_selection(RuleSelection())
    new, _ = migrate_text(_src("""
        import torch
        import torch.neuron

        traced = torch.neuron.trace(model, example_inputs=[x])
        print(torch.cat([x, x]).shape)
    """), "python", rules)
    lines = new.splitlines()
    assert lines[lines.index("import torch.neuron") - 1] == (
        "# TODO(neuron-migrate NM900): Remove this import once the torch-neuron (Inf1) calls below are ported.")
    assert "NM992" not in new
    assert migrate_text(new, "python", rules)[0] == new
    native, _ = migrate_text(_src("""
        import torch
        import torch.neuron

        print(torch.neuron.is_available(), torch.cat([x, x]).shape)
    """), "python", rules)
    assert "import torch.neuron" in native and "TODO" not in native  # the native device module: kept as it is


def test_a_dotted_old_stack_import_no_rule_touches_is_still_judged():
    """`import optimum.neuron` binds `optimum`: the self-check judges it by the module it imports, also in a unit
    where no rule edits anything (it was left unmarked). A name the unit reads only in code it evaluates from a
    string (`eval(f"optimum.neuron.{name}")`) is a use: the import is marked, not removed."""
    rules = RuleSet.from_selection(RuleSelection())
    unused, _ = migrate_text(_src("""
        import os
        import optimum.neuron

        print(os.getcwd())
    """), "python", rules)
    assert "optimum" not in unused
    evaluated, _ = migrate_text(_src("""
        import os
        import optimum.neuron

        model_class = eval(f"optimum.neuron.NeuronModelFor{os.environ['TASK']}")
    """), "python", rules)
    lines = evaluated.splitlines()
    assert lines[lines.index("import optimum.neuron") - 1].startswith("# TODO(neuron-migrate NM992): Replace `optimum`")
    assert migrate_text(evaluated, "python", rules)[0] == evaluated


def test_a_marker_stays_above_its_import_when_a_new_import_is_placed_there():
    """The import fix-up inserts new imports where the old one was: a marker about the old import stays
    right above it, so that a second run finds it (it once was added again on every run)."""
    rules = RuleSet.from_selection(RuleSelection())
    source = _src("""
        import optimum.neuron as on
        from optimum.neuron import NeuronModelForCausalLM

        model = NeuronModelForCausalLM.from_pretrained("m")
        on.utils.get_neuron_major()
    """)
    new, _ = migrate_text(source, "python", rules)
    lines = new.splitlines()
    assert "NM992" in lines[lines.index("import optimum.neuron as on") - 1]
    again, _ = migrate_text(new, "python", rules)
    assert again == new


@pytest.mark.parametrize("kind", ["python"])
def test_the_check_does_not_import_heavy_libraries(kind, tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\nfrom migrator.selfcheck.check import check_source\n"
        "check_source('from transformers import AutoModel\\nAutoModel.from_pretrained(\"m\", export=True)\\n')\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'diffusers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_writefile_cell_is_a_program_of_its_own():
    import json

    from migrator.selfcheck.programs import programs

    def cell(src):
        return {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": src}

    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        cell("import torch\n"),
        cell("%%writefile train.py\nmodel = torch.nn.Linear(2, 2)\n"),  # the file does not see the notebook's torch
        cell("x = torch.ones(1)\n"),
    ]}
    found = [(v.kind, v.name, notebook) for parts, notebook in programs("notebook", json.dumps(nb))
             for v in check_program(parts, notebook)]
    assert found == [(UNDEFINED, "torch", False)]


def test_the_text_report_counts_what_the_self_check_did(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(_src("""
        from optimum.neuron import NeuronSFTTrainer

        def train(model, dataset, args):
            return NeuronSFTTrainer(model, args=args, train_dataset=dataset, max_seq_length=512)
    """))
    out = subprocess.run([sys.executable, "-m", "migrator", "--check", "--no-progress", str(script)],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert ("Self-check: 1 rewrite not applied because it would have broken the code (NM991), "
            "1 old-stack import still used (NM992).") in out.stdout


def test_the_name_analysis_runs_only_when_an_edited_name_may_be_undefined():
    source = "import os\n\n\ndef f():\n    return os.sep, y\n"
    assert [v.name for v in check_source(source)] == ["y"]
    # the edits used only `os`, bound at module level and nowhere else: nothing they did can be undefined
    assert check_source(source, names={"os", "print"}) == []
    # a name the edits used that is not plainly bound: the analysis runs
    assert [v.name for v in check_source(source, names={"y"})] == ["y"]
    local = "def f():\n    import torch\n\n\ntorch.ones(1)\n"
    assert [v.name for v in check_source(local, names={"torch"})] == ["torch"]  # bound in a function only


def test_an_import_in_a_sibling_branch_does_not_bind_the_name():
    # pyflakes counts a binding anywhere in the scope; the check asks whether the import has run
    found = check_source(_src("""
        import sys

        if sys.argv[1] == "gpu":
            from diffusers import StableDiffusionPipeline
            pipe = StableDiffusionPipeline.from_pretrained("m")
        else:
            pipe = StableDiffusionPipeline.from_pretrained("m")

        def load():
            from peft import LoraConfig
            return LoraConfig()

        def other():
            return LoraConfig()
    """))
    assert kinds(found) == [(UNDEFINED, "LoraConfig"), (UNDEFINED, "StableDiffusionPipeline")]
    assert [v.line for v in found if v.name == "StableDiffusionPipeline"] == [7]


def test_an_availability_guard_binds_the_name_for_the_functions_that_read_it():
    # `if HAS_X: import X` at module level, X read in a function: the optional-import idiom (the caller checks
    # the guard); a read at module level outside the guard, or in the guard's else, is still judged
    found = check_source(_src("""
        from helpers import HAS_TRANSFORMERS

        if HAS_TRANSFORMERS:
            from transformers import AutoModel

        def load(path):
            return AutoModel.from_pretrained(path)

        model = AutoModel.from_pretrained("m")
    """))
    assert [(v.kind, v.name, v.line) for v in found] == [(UNDEFINED, "AutoModel", 9)]


def test_imports_that_run_before_the_read_bind_it():
    assert check_source(_src("""
        import sys

        try:
            import torch_neuronx
        except ImportError:
            torch_neuronx = None
        with open("f") as fh:
            import json
        if sys.argv:
            from a import X
        elif sys.platform:
            from b import X
        else:
            from c import X
        for _ in range(2):
            import os
            os.sep
        if sys.argv:
            import re
            re.compile("x")

        def f():
            import math
            def inner():
                return math.pi
            return inner, X, json, torch_neuronx
    """)) == []
    # a name the edits used that is imported only inside a branch is not "plainly bound": checked
    source = "import sys\nif sys.argv:\n    import json\nelse:\n    json.dumps(1)\n"
    assert [v.name for v in check_source(source, names={"json"})] == ["json"]


def test_a_notebook_runs_top_to_bottom():
    """A name read in a cell (in a function the cell calls too) whose only import is in a later cell is
    undefined there; the check sees it with or without the names the edits used."""
    cells = ["def load(m):\n    return AutoModelForCausalLM.from_pretrained(m)\n\n\nmodel = load('x')\n",
             "from transformers import AutoModelForCausalLM, AutoTokenizer\ntok = AutoTokenizer.from_pretrained('x')\n"]
    joined = "__nm_cell__(1)\n".join(cells)  # the notebook's program, as the engine migrates it
    for names in (None, {"AutoModelForCausalLM"}):
        found = check_source(joined, names=names)
        assert [(v.kind, v.name, v.line) for v in found] == [(UNDEFINED, "AutoModelForCausalLM", 2)]
    assert [(v.kind, v.name) for v in check_program(["AutoModelForCausalLM.from_pretrained('x')\n",
                                                     "from transformers import AutoModelForCausalLM\n"],
                                                    notebook=True)] == [(UNDEFINED, "AutoModelForCausalLM")]
    # one module (no cells): a function may use an import below it (it runs when called)
    assert check_source(joined.replace("__nm_cell__(1)\n", "").replace("model = load('x')\n", "")) == []
    # an import in an earlier cell binds the name
    assert check_source("__nm_cell__(1)\n".join(reversed(cells)).replace("model = load('x')\n", "")) == []


def test_the_import_a_notebook_cell_needs_is_bound_before_it():
    """The migration does not reuse an import of a later cell for a use in an earlier one."""
    import json

    rules = RuleSet.from_selection(RuleSelection())
    cells = ["from optimum.neuron import NeuronModelForCausalLM\n\n\ndef load(m):\n"
             "    return NeuronModelForCausalLM.from_pretrained(m, export=True)\n\n\nmodel = load('x')\n",
             "from transformers import AutoModelForCausalLM\nref = AutoModelForCausalLM.from_pretrained('x')\n"]
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": c}
                    for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    new, _ = migrate_text(json.dumps(nb), "notebook", rules)
    first = json.loads(new)["cells"][0]["source"]
    assert first.startswith("from transformers import AutoModelForCausalLM\n"), first
    assert "AutoModelForCausalLM.from_pretrained(m" in first


def test_an_import_a_device_switch_keeps_is_not_reported_removed():
    """A rule asks to remove an import that an availability gate with a fallback needs (the gate keeps it, so that
    it still chooses its branch): the report does not say it was removed."""
    rules = RuleSet.from_selection(RuleSelection())
    source = _src("""
        import torch.distributed as dist

        try:
            import torch_xla.distributed.xla_backend
            BACKEND = "xla"
        except ImportError:
            BACKEND = "gloo"
        dist.init_process_group("xla")
    """)
    new, findings = migrate_text(source, "python", rules)
    assert "import torch_xla.distributed.xla_backend" in new
    assert not [f for f in findings if f.fix == "applied" and "xla_backend removed" in f.message]
