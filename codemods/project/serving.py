"""The Neuron SDK's model servers (vLLM on NxD Inference, DJL LMI, TGI's Neuron backend): a launcher or an image
built on one keeps its own compiler flags, compile cache and XLA-era torch-neuronx, which the server needs. The
migration does not move a server: the environment and install rules leave such a unit as it is, and NM520 says
on the image what moving it would take."""

from __future__ import annotations

import re

#: what names one of the SDK's serving stacks in a Dockerfile or a launch script: its images (vLLM, DJL LMI and
#: TGI on Neuron), its packages (vllm-neuron, vllm_neuron, optimum-neuron's vLLM, djl_python) and DJL's server start. A bare `vllm serve`
#: does not count: vLLM runs on TorchNeuron too
_SERVING = re.compile(
    r"pytorch-inference-vllm-neuronx|vllm[-_]neuron\b|optimum[-_]neuron[-_]vllm|djl-inference:[^\s\"']*neuronx|djl[-_]serving|djl_python|"
    r"huggingface-neuronx-tgi|neuronx-tgi|text-generation-inference[^\s\"']*neuronx|dockerd-entrypoint\.sh\s+serve|"
    # vLLM's NxD Inference backend: its settings (bucketing, the compiled-artifacts folder) and its Python option
    r"\bNEURON_COMPILED_ARTIFACTS\w*|\bNEURON_(?:CONTEXT_LENGTH|TOKEN_GEN)_BUCKETS\b|\boverride_neuron_config\b"
)
SERVER_SCRIPT_MARKER = ("This runs a Neuron SDK model server (vLLM, DJL, TGI): keep its NEURON_* settings, or move "
                        "the server as a whole.")
SERVER_SCRIPT_WHY = """vLLM on NxD Inference (and the Neuron SDK's other model servers) compiles with the SDK's
    XLA-era stack: its NEURON_CC_FLAGS, its compile cache (NEURON_COMPILE_CACHE_URL, NEURON_COMPILED_ARTIFACTS) and its
    bucketing settings are what the server reads, so they are kept. Moving the server to TorchNeuron means its
    TorchNeuron release and configuration as a whole (vLLM's own cache and options), not editing these settings."""
SERVER_INSTALL_MARKER = ("Keep this install for the Neuron SDK model server this runs, or move the server to "
                         "TorchNeuron as a whole.")
#: an install of the old stack's packages (what a model server of the Neuron SDK keeps)
OLD_STACK_INSTALL = re.compile(r"optimum[-_]neuron|neuronx|torch[-_]xla|transformers[-_]neuronx|libneuronxla", re.I)
SERVING_MARKER = ("This image builds a Neuron SDK model server (vLLM, DJL, TGI): move it to a TorchNeuron "
                  "serving image as a whole.")


def neuron_sdk_server(text: str) -> bool:
    """Whether a Dockerfile or a launch script builds or starts one of the Neuron SDK's model servers."""
    return _SERVING.search(text) is not None
