"""Transformers 4.x behaviours that old-stack scripts rely on and Transformers 5 removed, restored on the
original side when the installed Transformers is 5 or later (an original run with ``--original-python``
on a 4.x interpreter is left as it is).

* ``from_pretrained(..., torchscript=True)``, the usual preparation for ``torch.jit.trace`` /
  ``torch_neuronx.trace``: in 4.x it set ``config.torchscript``, which made the model return tuples
  (``return_dict`` off) and give tied weights their own copies (TorchScript could not share them).
  Transformers 5 rejects the keyword; here the model is loaded with ``return_dict=False``. The copies
  of tied weights are not modelled: they hold the same values.

* ``tokenizer.encode_plus(text, ...)`` / ``batch_encode_plus(texts, ...)``: the tokenizer's ``__call__``.
* ``from huggingface_hub import HfFolder`` (huggingface_hub 0.x): ``get_token``/``save_token``/
  ``delete_token`` over the hub's ``get_token``/``login``/``logout`` of today.

The training-argument fields of 4.x are mapped by ``optimum_training`` (they reach the Trainer through
the emulated ``NeuronTrainingArguments``).
"""

from __future__ import annotations

import copy
import functools
import os

_MARK = "__neuron_migrate_transformers4__"


def _major(transformers) -> int:
    try:
        return int(str(transformers.__version__).split(".")[0])
    except (AttributeError, ValueError):
        return 0


def patch(modeling_utils) -> None:
    """Applied once ``transformers.modeling_utils`` is imported (idempotent)."""
    import transformers

    cls = getattr(modeling_utils, "PreTrainedModel", None)
    original = cls.__dict__.get("from_pretrained") if cls is not None else None
    if original is None or _major(transformers) < 5 or hasattr(original.__func__, _MARK):
        return
    func = original.__func__

    @functools.wraps(func)
    def from_pretrained(klass, *args, **kwargs):
        if kwargs.pop("torchscript", False):
            config = kwargs.get("config")
            if config is None or isinstance(config, (str, os.PathLike)):
                kwargs.setdefault("return_dict", False)  # read into the config it loads
            else:  # a config object (the Auto classes pass the one they loaded): not read from kwargs
                config = copy.deepcopy(config)
                config.return_dict = False
                kwargs["config"] = config
        return func(klass, *args, **kwargs)

    setattr(from_pretrained, _MARK, True)
    cls.from_pretrained = classmethod(from_pretrained)


def patch_tokenizers(tokenization_utils_base) -> None:
    """``encode_plus``/``batch_encode_plus`` (removed in Transformers 5): the tokenizer's ``__call__``."""
    cls = getattr(tokenization_utils_base, "PreTrainedTokenizerBase", None)
    if cls is None:
        return
    if not hasattr(cls, "encode_plus"):
        def encode_plus(self, text, text_pair=None, **kwargs):
            return self(text, text_pair=text_pair, **kwargs)

        cls.encode_plus = encode_plus
    if not hasattr(cls, "batch_encode_plus"):
        def batch_encode_plus(self, batch_text_or_text_pairs, **kwargs):
            return self(list(batch_text_or_text_pairs), **kwargs)

        cls.batch_encode_plus = batch_encode_plus


def patch_hub(huggingface_hub) -> None:
    """``HfFolder`` (huggingface_hub 0.x) over the token functions of today."""
    if "HfFolder" in getattr(huggingface_hub, "__dict__", {}) or hasattr(huggingface_hub, "HfFolder"):
        return

    class HfFolder:
        @staticmethod
        def get_token():
            return huggingface_hub.get_token()

        @staticmethod
        def save_token(token):
            huggingface_hub.login(token=token, add_to_git_credential=False)

        @staticmethod
        def delete_token():
            huggingface_hub.logout()

    huggingface_hub.HfFolder = HfFolder


def installed_major(dist: str) -> int | None:
    """The major version of the installed distribution (read from its metadata: nothing is imported)."""
    import importlib.metadata

    try:
        return int(importlib.metadata.version(dist).split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def install() -> None:
    """Patch Transformers now if it is imported, else the moment it is (verify's post-import hooks); not
    at all where the installed Transformers is 4.x (``--original-env``: the real old library), nor
    ``HfFolder`` where huggingface_hub is 0.x."""
    from migrator.verify.instrument import on_import

    if (installed_major("transformers") or 5) >= 5:
        on_import("transformers.modeling_utils", patch)
        on_import("transformers.tokenization_utils_base", patch_tokenizers)
    if (installed_major("huggingface_hub") or 1) >= 1:
        on_import("huggingface_hub", patch_hub)
