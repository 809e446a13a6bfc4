"""The Neuron Deep Learning AMI's virtual environments of the XLA-era stack (NM528 in scripts, NM900 in Python)."""

from __future__ import annotations

import re

#: a virtual environment of the Neuron Deep Learning AMI (`/opt/aws_neuronx_venv_pytorch_2_9_nxd_inference`,
#: `/opt/aws_neuron_venv_pytorch_1_13_inf1`); the TensorFlow ones are no concern of this tool
_DLAMI_VENV_RE = re.compile(r"/opt/aws_neuronx?_venv(?!_tensorflow)\w*")
_VENV_TORCH_RE = re.compile(r"pytorch_(\d+)_(\d+)")
VENV_MARKER = ("Use a TorchNeuron (torch-neuronx 2.13+) environment here: this Deep Learning AMI venv has the "
               "XLA-era Neuron stack.")


def xla_era_venv(text: str) -> bool:
    """Whether ``text`` names a Deep Learning AMI virtual environment of the XLA-era stack (any but one whose
    name says PyTorch 2.13 or later, the TorchNeuron ones)."""
    for m in _DLAMI_VENV_RE.finditer(text):
        version = _VENV_TORCH_RE.search(m.group(0))
        if version is None or (int(version.group(1)), int(version.group(2))) < (2, 13):
            return True
    return False
