"""What the emulation tells verify's observation layer (``migrator.verify.observe``, when it is loaded:
the emulation also runs without it). The emulated wrappers run the wrapped model from their own code,
which the observation layer does not count as the user's call: they report the call the user made."""

from __future__ import annotations

import sys


def _observe():
    return sys.modules.get("migrator.verify.observe")


def observed(model, output) -> None:
    """The user called the emulated wrapper of ``model`` and got ``output`` (called from the wrapper's
    method that the user called: the observation layer checks that frame's caller is user code)."""
    observe = _observe()
    if observe is not None:
        observe.emulated_forward(model, output)


def traced(func, guarded, inputs) -> None:
    """``torch_neuronx.trace`` (called by the user) ran ``func`` on the example inputs: a call of the model
    unless the script calls the traced module itself (the observation layer takes it back then)."""
    observe = _observe()
    if observe is not None and observe.capturing():
        import torch

        with torch.no_grad():
            output = guarded(*inputs)
        observe.emulated_trace(func, guarded, output)
