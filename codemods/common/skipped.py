"""Findings of the engine itself: NM990 (a unit that could not be analysed) and the self-check's
NM991 (an edit dropped because it would break the code) and NM992 (an old-stack import left behind)."""

from __future__ import annotations

from migrator.rules import Rule


class SkippedUnit(Rule):
    id = "NM990"
    title = "Notebook cell or markdown code block that does not parse on its own"
    fix = "manual"
    kinds = ("notebook", "markdown")
    why = """
        A notebook's Python cells are migrated together as one program, a fenced code block as a
        unit of its own. A cell or block that mentions the old stack but does not parse as Python
        on its own (IPython syntax beyond magics and `!` lines, a fragment, a doctest transcript)
        is left unchanged and reported so that a person can migrate it; the other cells of the
        notebook are still migrated.
    """
    before = """
        ```python
        model = NeuronModelForCausalLM.from_pretrained(  # the block stops mid-call
        ```
    """
    after = """
        (unchanged; reported as NM990)
    """


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
        # TODO(neuron-migrate NM992): `optimum.neuron` does not exist on TorchNeuron and `NeuronSFTTrainer` is still used below: ...
        from optimum.neuron import NeuronSFTTrainer

        def train(model, dataset, args):
            # TODO(neuron-migrate NM202): SFTTrainer takes max_seq_length from SFTConfig now: move them to the config (...)
            # TODO(neuron-migrate NM991): NM200's rewrite here was not applied because `trl.SFTTrainer(max_seq_length=)` is not accepted by the target library: migrate this statement by hand
            trainer = NeuronSFTTrainer(model, args=args, train_dataset=dataset, max_seq_length=512)
    """
    caveats = """
        The check knows the target libraries from data generated from the installed pinned
        versions (`tools/gen_target_api.py`); calls it cannot resolve statically are not checked.
    """


class OldStackImport(Rule):
    id = "NM992"
    title = "Old-stack import still used after the migration"
    fix = "manual"
    kinds = ("python", "notebook", "markdown")
    why = """
        An import of a package the TorchNeuron environment does not have (torch_xla, optimum.neuron,
        transformers_neuronx, neuronx_distributed, ...) stops the script at its first line. After
        the rules ran, such an import that nothing uses any more is removed, like every import the
        edits left unused (a bare `import torch_xla` kept after every `xm.*` use was rewritten); one
        that is still used gets this marker. Imports
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
        # TODO(neuron-migrate NM992): `torch_xla.utils.utils` does not exist on TorchNeuron and `xu` is still used below: ...
        import torch_xla.utils.utils as xu

        device = torch.device("neuron")
        # TODO(neuron-migrate NM900): torch_xla.utils.utils.get_free_tcp_ports has no automatic native replacement: ...
        ports = xu.get_free_tcp_ports()
    """


RULES = (SkippedUnit, DroppedEdit, OldStackImport)
