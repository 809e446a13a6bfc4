"""The fixed rule set the CLI tests run with (through NEURON_MIGRATE_RULES).

The CLI tests check the command line, reports, writes and exit codes, not what a particular rule
does. They run on the rename table, NM900, NM901 and NM990 only, so that adding an argument rule
that takes over one of their example names does not change their expectations.
"""

from codemods import all_rules

CORE = ("NM100", "NM200", "NM300", "NM900", "NM901", "NM990")


def rules():
    return tuple(r for r in all_rules() if r.id in CORE)
