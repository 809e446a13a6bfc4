"""Upgrades (NM6xx): code that already runs on native Transformers/TRL but uses their APIs of
an older release (renamed arguments, moved classes) brought to the versions the migrated code
needs, one module per library, each ending with ``RULES = (...)`` added to the tuple below:

* ``transformers_v5``: NM601 (AdamW), NM602 (training-argument fields), NM603 (trainer
  ``tokenizer=``), NM605 (``use_auth_token=``), NM606 (``send_example_telemetry``), NM607 (``torch_dtype=``);
* ``accelerate``: NM604 (``Accelerator(fp16=)``).

Helpers shared by them are in ``base``."""

from codemods.upgrade import accelerate, transformers_v5

RULES: tuple = transformers_v5.RULES + accelerate.RULES
