"""Self-check of migrated code against the target stack.

Every unit a rule changed is checked before anything is reported or written: names that resolved
before and do not after, imports of the target libraries that do not exist in the pinned versions,
keyword arguments a target callable does not accept, and imports of the old stack left without a
marker. The facts about the target stack come from data generated from the installed pinned
libraries (``target_api.json.gz``, ``tools/gen_target_api.py``); nothing here imports torch.

:func:`check_program` finds the violations of one program (a ``.py`` file, a notebook's code
cells in order, a markdown code block); :func:`introduced` tells which of them an edit made.
The engine's policy (complete the edit or drop it with a marker) is in :mod:`.policy`. The package
imports nothing itself (its modules import each other: no circle through it).
"""
