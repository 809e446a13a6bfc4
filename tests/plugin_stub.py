"""The TorchNeuron plugin's place in the CPU runs of migrated scripts.

A migrated script keeps its ``import torch_neuronx`` (the plugin PyTorch autoloads on a Trainium host; the
migration leaves that import alone). This machine has no plugin: :func:`plugin_stub` puts an empty
``torch_neuronx`` package in the script's folder, which comes first on its ``sys.path``, so that the import
succeeds and nothing else of the migrated text changes (:func:`plugin_in_process` for code run in this process).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path


def plugin_in_process(monkeypatch) -> None:
    """The same for migrated code run in this process (``exec``): an empty ``torch_neuronx`` module in sys.modules."""
    monkeypatch.setitem(sys.modules, "torch_neuronx", types.ModuleType("torch_neuronx"))


def plugin_stub(folder: Path) -> None:
    package = folder / "torch_neuronx"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text('"""Stand-in for the TorchNeuron plugin in CPU test runs."""\n')
