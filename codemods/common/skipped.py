"""NM990: a notebook cell or markdown code block that could not be analysed."""

from __future__ import annotations

from migrator.rules import Rule


class SkippedUnit(Rule):
    id = "NM990"
    title = "Notebook cell or markdown code block that does not parse on its own"
    fix = "manual"
    kinds = ("notebook", "markdown")
    why = """
        A notebook cell or a fenced code block is migrated as a unit of its own. When it mentions
        the old stack but does not parse as Python (IPython syntax beyond magics and `!` lines, a
        fragment, a doctest transcript), it is left unchanged and reported so that a person can
        migrate it.
    """
    before = """
        ```python
        model = NeuronModelForCausalLM.from_pretrained(  # the block stops mid-call
        ```
    """
    after = """
        (unchanged; reported as NM990)
    """


RULES = (SkippedUnit,)
