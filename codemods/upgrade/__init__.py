"""Upgrades (NM6xx): code that already runs on native Transformers/TRL but uses their APIs of
an older release (renamed arguments, moved classes) brought to the versions the migrated code
needs. No rule lives here yet; the rules of the Transformers/TRL upgrade issue will, one module per
library, each ending with ``RULES = (...)`` added to the tuple below."""

RULES: tuple = ()
