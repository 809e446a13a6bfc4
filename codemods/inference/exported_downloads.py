"""NM113: a download of a pre-exported Neuron model from the Hugging Face Hub.

The Neuron examples download models that optimum-neuron compiled ahead of time, published under the
``aws-neuron`` organisation (``aws-neuron/Llama-2-7b-chat-hf-seqlen-2048-bs-2`` at a revision named after a
Neuron SDK release)::

    snapshot_download("aws-neuron/bge-base-en-v1-5-seqlen-384-bs-1", revision="2.15.0", local_dir="model")

Such a repository holds NEFFs and an optimum-neuron config, which Transformers cannot load and TorchNeuron
does not run: the folder the migrated code loads must hold the original checkpoint (its model card names
it). The download is left as it is, with a marker.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.arg_plan import string_value
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule

#: the huggingface_hub calls that download a repository's files: the positional index of the repo id
DOWNLOADS = {
    "huggingface_hub.snapshot_download": 0,
    "huggingface_hub.hf_hub_download": 0,
    "huggingface_hub.HfApi.snapshot_download": 0,
    "huggingface_hub.HfApi.hf_hub_download": 0,
}
#: the organisation that publishes optimum-neuron's pre-exported models
_EXPORTED = re.compile(r"aws-neuron/[\w.-]+")
MARKER = "Download the original checkpoint instead: {repo} is a pre-exported Neuron model, which Transformers cannot load."
NAMED = "Download the original checkpoint instead: {repo} is a pre-exported Neuron model."
SHORT = "Download the original checkpoint instead: this repository is a pre-exported Neuron model."


class PreExportedDownload(PythonRule):
    id = "NM113"
    markers = ((MARKER, """The aws-neuron organisation on the Hugging Face Hub publishes models that
        optimum-neuron compiled ahead of time for one Neuron SDK release (the revision) and fixed shapes (the
        sequence length and batch size in the name): NEFFs and an optimum-neuron config, no checkpoint that
        Transformers can load. Download the model it was exported from (its model card names it) into the same
        folder; the migrated code loads it with device_map="neuron" and compiles it on first use."""),)
    title = "Hub download of a pre-exported Neuron model (aws-neuron/...): marker"
    fix = "manual"
    triggers = ("aws-neuron/",)
    why = """
        Neuron examples download a model that optimum-neuron compiled ahead of time from the
        `aws-neuron` organisation of the Hugging Face Hub (`snapshot_download("aws-neuron/...",
        revision="2.15.0", local_dir=...)`, `hf_hub_download`), then load that folder. Such a
        repository holds compiled NEFFs for one Neuron SDK release and fixed shapes, which
        Transformers cannot load and TorchNeuron does not run. The download gets a marker: fetch
        the original checkpoint into the folder instead (its model card names it).
    """
    before = """
        from huggingface_hub import snapshot_download

        snapshot_download("aws-neuron/bge-base-en-v1-5-seqlen-384-bs-1", revision="2.15.0", local_dir="model")
    """
    after = """
        from huggingface_hub import snapshot_download

        # TODO(neuron-migrate NM113): Download the original checkpoint instead: aws-neuron/bge-base-en-v1-5-seqlen-384-bs-1 is a pre-exported Neuron model.
        snapshot_download("aws-neuron/bge-base-en-v1-5-seqlen-384-bs-1", revision="2.15.0", local_dir="model")
    """
    caveats = """
        The repository id must be a literal, or a name the module assigns a literal once; a download of
        another organisation's repository is left alone (what it holds is not known), and so are the
        loads of the downloaded folder (the inference rules mark those of optimum-neuron classes).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        if qual not in DOWNLOADS:
            return
        repo = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "repo_id"), None)
        positional = [a for a in node.args if a.keyword is None and not a.star]
        if repo is None and len(positional) > DOWNLOADS[qual]:
            repo = positional[DOWNLOADS[qual]].value
        text = string_value(repo, ctx)
        if text is None or not _EXPORTED.fullmatch(text):
            return
        ctx.marker(node, fitted(MARKER.format(repo=text), NAMED.format(repo=text), SHORT))


RULES = (PreExportedDownload,)
