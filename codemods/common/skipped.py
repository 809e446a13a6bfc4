"""Findings of the engine itself: NM990 (a unit that could not be analysed) and the self-check's
NM991 (an edit dropped because it would break the code) and NM992 (an old-stack import left behind)."""

from __future__ import annotations

from migrator.rules import Rule


class SkippedUnit(Rule):
    id = "NM990"
    title = "Notebook cell or markdown code block that does not parse on its own, or is not rewritten"
    fix = "manual"
    kinds = ("notebook", "markdown")
    why = """
        A notebook's Python cells are migrated together as one program, a fenced code block as a
        unit of its own. A cell or block that mentions the old stack but does not parse as Python
        on its own (IPython syntax beyond magics and `!` lines, a fragment, a doctest transcript)
        is left as it is, with a marker on its first line, so that a person can migrate it; the
        other cells of the notebook are still migrated. A Markdown block of a language the rules do
        not read (`diff`, `text`, `yaml`, untagged) that shows old-stack code (its imports,
        `optimum-cli export neuron`, `neuron_parallel_compile`, `NeuronModelFor*`) gets the same kind
        of marker; JSON blocks, which have no comments, and plain output are left alone.
    """
    before = """
        ```python
        model = NeuronModelForCausalLM.from_pretrained(  # the block stops mid-call
        ```
    """
    after = """
        (unchanged; reported as NM990)
    """
    markers = (
        ("Migrate this heredoc's Python by hand, or quote its delimiter (<<'EOF'): the shell expands $ and ` in it.",
         """A Python heredoc whose delimiter is not quoted (<<EOF) has its body expanded by the shell
         before Python sees it ($VAR, `cmd`), so the text in the file is not the program that runs and
         cannot be migrated as Python. Quote the delimiter (<<'EOF') and pass values through the
         environment (os.environ) instead, then run the migration again."""),
    )


class DroppedEdit(Rule):
    id = "NM991"
    title = "Rewrite not applied: it would have broken the code (self-check)"
    fix = "manual"
    kinds = ("python", "notebook", "markdown", "shell")
    why = """
        Every unit a rule changed is checked before anything is written: code that does not parse
        (Python, and shell text with the shell rules' parser), a name that resolved before and
        would not after (a notebook runs top to bottom: a name imported only in a later cell is
        undefined in an earlier one), an import of the target libraries that does not exist in the
        pinned versions, or a keyword argument the target callable does not accept. The engine first
        tries to complete the edit (a name imported elsewhere in the module is imported where it is
        used); when that is not enough, the edits that caused the problem are not applied and this
        marker says which rule's rewrite was left out and why. The code stays as it was there.
        Code that does not parse is never written, whatever --select says: when dropping rewrites
        rule by rule does not repair it, the whole unit is left as it was and a finding says which
        rules "produced code that does not parse"; the summary counts such a file as an error.
    """
    before = """
        from optimum.neuron import NeuronSFTTrainer

        def train(model, dataset, args):
            trainer = NeuronSFTTrainer(model, args=args, train_dataset=dataset, max_seq_length=512)
    """
    after = """
        # TODO(neuron-migrate NM992): Remove this import once the TODOs on `NeuronSFTTrainer` below are done.
        from optimum.neuron import NeuronSFTTrainer

        def train(model, dataset, args):
            # TODO(neuron-migrate NM991): Migrate this by hand: `SFTTrainer` does not take `max_seq_length=`, so NM200's rewrite was left out.
            trainer = NeuronSFTTrainer(model, args=args, train_dataset=dataset, max_seq_length=512)
    """
    caveats = """
        The check knows the target libraries from data generated from the installed pinned
        versions (`tools/gen_target_api.py`); calls it cannot resolve statically are not checked.
    """
    markers = (
        ("Migrate this by hand: `{callable}` does not take {keywords}, so {rule}'s rewrite was left out.",
         """The rewrite would call the target with keyword arguments that the pinned target version's
         signature does not have (a TRL 0.x argument that moved to the config, a Neuron-only option), so
         the statement is left as it was: move those values where the target takes them (often the
         `*Config` object) or drop them, and rewrite the call."""),
        ("Migrate this by hand: {rule}'s rewrite would leave {names} undefined.",
         """The rewrite uses a name that nothing binds where the statement runs (in a notebook, a name
         imported only in a later cell), so the statement is left as it was: import or define the name
         before this statement and rewrite it."""),
        ("Migrate this by hand: {rule}'s rewrite imports {names}, missing in the pinned target.",
         """The rewrite imports a name that the pinned target libraries (the versions the target API data
         was generated from) do not have, so the statement is left as it was."""),
        ("Migrate this by hand: {rule}'s rewrite produced code that does not parse.",
         """The rewrite rendered text that is not valid code, so it was not applied; the statement is
         left as it was. Please report it: a rule must never produce unparsable code."""),
        ("Migrate this command by hand: {rule}'s rewrite produced code that does not parse.",
         """The rewrite of this shell command rendered text that the shell parser rejects, so it was not
         applied; the command is left as it was. Please report it."""),
    )


class OldStackImport(Rule):
    id = "NM992"
    title = "Old-stack import still used after the migration"
    fix = "mixed"
    kinds = ("python", "notebook", "markdown")
    why = """
        An import of a package the TorchNeuron environment does not have (torch_xla, optimum.neuron,
        transformers_neuronx, neuronx_distributed, ...) stops the script at its first line. After
        the rules ran, such an import that nothing uses any more is removed, like every import the
        edits left unused (a bare `import torch_xla` kept after every `xm.*` use was rewritten), and
        the removal is reported as an applied finding; one
        that is still used gets this marker: where every use carries a marker of its own, it only
        says to remove the import once those are done (the uses say what to do). Imports
        guarded by `try: ... except ImportError:` are left alone. `import torch_neuronx` is the
        TorchNeuron plugin itself and is never touched.
    """
    before = """
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.utils.utils as xu

        device = xm.xla_device()
        ports = xu.get_free_tcp_ports()
    """
    after = """
        import torch
        # TODO(neuron-migrate NM992): Remove this import once the TODOs on `xu` below are done.
        import torch_xla.utils.utils as xu

        device = torch.device("neuron")
        # TODO(neuron-migrate NM900): Replace `xu.get_free_tcp_ports` with its torch or torch.distributed equivalent.
        ports = xu.get_free_tcp_ports()
    """
    markers = (
        ("Replace {names} below with native code, then remove this import.",
         """The imported module does not exist on TorchNeuron, so the script stops at this import. The
         names listed are still used below after the migration: rewrite each use with its native
         equivalent (the marker on the use, or `neuron-migrate explain` of its rule, says how), then
         delete the import. Imports nothing uses any more are removed by the migration itself."""),
        ("Keep this import for the old-stack code kept below ({names}).",
         """A use of the names listed is kept on the old stack on purpose (its own marker says to keep it: the
         consolidation of an old run's checkpoints, a branch that serves TPUs), so it still needs this import:
         keep both where that code runs (an environment with the old package)."""),
        ("Remove this import once the TODOs on {names} below are done.",
         """The imported module does not exist on TorchNeuron, so the script stops at this import. Every
         use of the names listed carries a marker saying what to do there; once those are done the
         import is unused: delete it, or run the migration again, which removes it."""),
    )


RULES = (SkippedUnit, DroppedEdit, OldStackImport)
