"""NM112: ``optimum-cli export neuron`` run from Python (``subprocess`` / ``os.system``) is obsolete.

A script or test that compiles a model by running the export command::

    subprocess.run(["optimum-cli", "export", "neuron", "--model", model_id, "--sequence_length", "128", "out/"])

has no TorchNeuron counterpart: there is no ahead-of-time export (the model compiles at its first call
on the ``neuron`` device). The command is left as it is with a marker saying what its consumer loads
instead (the original checkpoint). The shell form is NM510's; the loads that read the output directory
are the inference rules' (a test that runs the command and asserts on its output gets their
"tests a Neuron export" marker: codemods/common/export_only.py).
"""

from __future__ import annotations

import libcst as cst

from codemods.common.export_only import cli_export
from migrator.rules import PythonContext, PythonRule


class ExportCliFromPython(PythonRule):
    id = "NM112"
    markers = (
        ("Delete this Neuron export and load {model} {where}.", """`optimum-cli export neuron` compiled a Neuron
        artifact ahead of time; TorchNeuron has no such step (the model compiles on first use), so the export
        goes and the code that loaded its output loads the original checkpoint with device_map="neuron"."""),
    )
    title = "optimum-cli export neuron run through subprocess / os.system: obsolete (marker)"
    fix = "manual"
    triggers = ("optimum-cli",)
    why = """
        `optimum-cli export neuron` compiled a model ahead of time into a directory of NEFFs that
        optimum-neuron then loaded. TorchNeuron has no export step: a model loaded with
        `from_pretrained(model_id, device_map="neuron")` compiles at its first call and caches the
        compiled graphs itself. A Python script that runs the command (`subprocess.run([...])`,
        `subprocess.check_call`, `Popen`, `os.system("...")`) gets a marker: delete the step, and let
        whatever loaded the output directory load the original checkpoint instead.
    """
    before = """
        import subprocess

        subprocess.run(["optimum-cli", "export", "neuron", "--model", "bert-base-uncased", "--sequence_length", "128", "bert_neuron/"], check=True)
    """
    after = """
        import subprocess

        # TODO(neuron-migrate NM112): Delete this Neuron export and load 'bert-base-uncased' wherever 'bert_neuron/' was loaded.
        subprocess.run(["optimum-cli", "export", "neuron", "--model", "bert-base-uncased", "--sequence_length", "128", "bert_neuron/"], check=True)
    """
    caveats = """
        Only a command given as a literal list of strings or a literal (or f-) string is recognised;
        one built elsewhere and passed as a variable is not. The shapes of the export (`--batch_size`,
        `--sequence_length`) become the shapes to pad the inputs to (see `neuron-migrate explain NM510`).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        cli = cli_export(node, ctx)
        if cli is None:
            return
        model = cli.model or "the original checkpoint"
        where = f"wherever {cli.output} was loaded" if cli.output else "where its output was loaded"
        model = model if len(model) <= 36 else model[:33] + "..."
        where = where if len(where) <= 50 else where[:47] + "..."
        ctx.marker(node, f"Delete this Neuron export and load {model} {where}.")


RULES = (ExportCliFromPython,)
