"""Rules that emit code that does not parse, for the tests of the output guard (NM991).

``NM997`` replaces the name ``BROKEN_TARGET`` with a string literal everywhere, also where it is
assigned (``BROKEN_TARGET = 1`` -> ``"broken" = 1``, which libcst renders but Python does not parse).
``NM998`` does the same to ``OTHER_TARGET`` (two rules that each break the unit). ``NM995``, a shell
rule, opens a quote it never closes on each line that says ``BROKEN_SHELL``.
"""

import libcst as cst

from codemods import all_rules_parsers as rules_parsers  # noqa: F401  (the loader's parse checks: the shell parser)
from migrator.rules import PythonContext, PythonRule, TextContext, TextRule
from tests.cli_rules import rules as core_rules


class _Stringify(PythonRule):
    fix = "auto"
    kinds = ("python", "notebook", "markdown")
    name = ""
    title = "test rule: a name becomes a string literal, also as an assignment target"

    def handlers(self):
        return {cst.Name: self._on_name}

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        if node.value == self.name:
            ctx.replace(node, cst.SimpleString('"broken"'))
            ctx.finding(node, f"{self.name} -> a string")


class BrokenTarget(_Stringify):
    id = "NM997"
    name = "BROKEN_TARGET"
    triggers = (name,)


class OtherTarget(_Stringify):
    id = "NM998"
    name = "OTHER_TARGET"
    triggers = (name,)


class BrokenShell(TextRule):
    id = "NM995"
    fix = "auto"
    kinds = ("shell",)
    triggers = ("BROKEN_SHELL",)
    title = "test rule: a shell line that opens a quote it never closes"

    def apply(self, ctx: TextContext) -> None:
        for i, line in enumerate(ctx.lines):
            if "BROKEN_SHELL" in line:
                ctx.replace_lines(i, i + 1, [line.replace("BROKEN_SHELL", 'echo "open')], "BROKEN_SHELL -> echo")


def rules():
    return core_rules() + (BrokenTarget(), OtherTarget(), BrokenShell())
