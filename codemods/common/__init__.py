"""Rules and helpers that belong to no single family. The rename table (``renames.py`` +
``renames.toml``: NM100 inference names, NM200 training names, NM300 parallelism names -- the
fallback for every old-stack name no other rule owns), the leftovers that make sure nothing is left
silently (``leftovers.py``: NM900, an old-stack import or name with no automatic replacement;
``neuron_kwargs.py``: NM901, Neuron-only arguments on a call the renames moved to a native class;
``patch_targets.py``: NM902, mock.patch targets naming the old stack), the engine's own report of a
unit it could not parse (``skipped.py``: NM990), and the helpers shared by several families: the
argument plans (``arg_plan.py``) and which hardware a branch runs on (``hardware.py``: a rule leaves
another machine's branch alone). Rule ids ending in 00
and NM9xx live here."""

from codemods.common import leftovers, neuron_kwargs, patch_targets, renames, skipped

RULES = (
    *leftovers.RULES,
    *neuron_kwargs.RULES,
    *patch_targets.RULES,
    *renames.RULES,
    *skipped.RULES,
)
