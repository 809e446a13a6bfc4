"""NM990: a notebook cell or markdown code block that could not be analysed."""

from __future__ import annotations

from migrator.rules import Rule


class SkippedUnit(Rule):
    id = "NM990"
    title = "Notebook cell or markdown code block that does not parse on its own"
    fix = "manual"
    kinds = ("notebook", "markdown")
    why = """
        A notebook's Python cells are migrated together as one program, a fenced code block as a
        unit of its own. A cell or block that mentions the old stack but does not parse as Python
        on its own (IPython syntax beyond magics and `!` lines, a fragment, a doctest transcript)
        is left unchanged and reported so that a person can migrate it; the other cells of the
        notebook are still migrated.
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
