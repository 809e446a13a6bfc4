"""Shell units and the edit plan shared by the shell rules (NM510-NM516, NM523) and Dockerfile rules.

Shell units are ``.sh``/``.slurm`` files, notebook ``!`` lines and ``%%bash`` cells, and bash fences
of Markdown documents. Every unit is lexed and parsed once (a small bash lexer/parser that knows
quotes, ``\\`` continuations, ``$(...)``/``${...}``/backticks, arrays, heredocs, comments and the
compound commands) and the rules edit the commands they understand, word by word,
through a plan shared by all of them (several rules may edit the same command:
``NEURON_CC_FLAGS=... XLA_USE_BF16=1 neuron_parallel_compile torchrun ...``).

Safety rules the plan follows:

* a unit that does not lex or parse is left alone (nothing is edited, nothing is marked);
* heredoc bodies and the inside of ``$(...)``, backticks and quoted strings are never edited;
* a removed command that was alone on its lines removes those lines (all physical lines of a
  continued command); in ``a && b`` it goes with its ``&&``; where removing it would change the
  shape of the script (a pipeline, ``||``, the only command of an ``if``/``do``/``{}`` body), it
  becomes ``:``;
* markers and explanatory comments are only put above the first line of a statement.

The lexer/parser and the plan are used by :mod:`codemods.project.shell` (NM510-NM512, NM514), by
:mod:`codemods.project.neuron_cc_flags` (NM513), by :mod:`codemods.project.dockerfile` (``ENV`` lines) and by
:mod:`codemods.project.launch_flags` (NM515-NM516, NM523), which also writes new words through the plan:
:meth:`ShellPlan.prefix` (``TP_SIZE=8`` before the first word left of a command) and
:meth:`ShellPlan.append` (``--torch_compile true`` after the last argument left, on a new
continuation line when the command is continued), placed when the group is rendered so that
they compose with the deletions of the other rules.
"""

from __future__ import annotations

import bisect
import functools
import re
import shlex
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable

from migrator.model import ignored_rules, is_silenced, marker_text
from migrator.rules import LineEdit, TextRule

from codemods.project.shell_syntax import (
    AndOr,
    ASSIGN_RE,
    Lexer,
    NAME_RE,
    Parser,
    ShellSyntaxError,
    Simple,
    Tok,
)


def comment_line(rule: str, text: str) -> str:
    """An explanatory comment written by a rule (never a manual-action marker, never an ignore)."""
    return f"# neuron-migrate {rule}: {' '.join(text.split())}"


# ------------------------------------------------------------------------------------------------
# A parsed unit


def word_value(text: str) -> str | None:
    """The value of a shell word without expansions (quotes removed), or None if it has any."""
    if any(c in text for c in "$`") or "\n" in text:
        return None
    if not any(c in text for c in "\"'\\ \t"):
        return text
    try:
        parts = shlex.split(text, posix=True)
    except ValueError:
        return None
    return parts[0] if len(parts) == 1 else None


class Lines:
    """The lines of a unit joined with "\\n" (``src``), and offsets <-> (line, column)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.src = "\n".join(lines)
        self.line_starts = [0]
        for line in lines[:-1]:
            self.line_starts.append(self.line_starts[-1] + len(line) + 1)

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset) - 1

    def col_of(self, offset: int) -> int:
        return offset - self.line_starts[self.line_of(offset)]


class ShellUnit(Lines):
    """One shell unit, lexed and parsed. Raises ShellSyntaxError when it cannot be understood."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines)
        text = self.src
        if any(c in text for c in "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\r"):
            raise ShellSyntaxError("unusual line separators")
        lexer = Lexer(text)
        self.toks = lexer.tokens()
        self.comments = lexer.comments
        self.heredoc_spans = lexer.heredoc_spans
        parser = Parser(self.toks)
        self.top = parser.program()
        self.simples = parser.simples
        self.bodies = parser.bodies
        self._groups()

    @functools.cached_property
    def branch_tests_by_first(self) -> dict[int, list[tuple[str, list[str]]]]:
        """``branch_tests`` of every command, keyed by its first token (computed once per unit)."""
        return _all_branch_tests(self)

    def _groups(self) -> None:
        """Statements: lines joined by continuations, multi-line words, or a newline after && || |."""
        self.groups: list[tuple[int, int]] = []
        self.group_of_tok: list[int] = []
        start: int | None = None
        prev: Tok | None = None
        for tok in self.toks:
            if tok.kind == "nl":
                joined = prev is not None and prev.kind == "op" and prev.text in ("&&", "||", "|", "|&")
                if start is not None and not joined:
                    self.groups.append((start, self.line_of(tok.start)))
                    start = None
                self.group_of_tok.append(len(self.groups) if start is not None else -1)
                continue
            if start is None:
                start = self.line_of(tok.start)
            self.group_of_tok.append(len(self.groups))
            prev = tok
        if start is not None:
            last = self.toks[-1]
            self.groups.append((start, self.line_of(max(last.start, last.end - 1))))
        # a group that has a heredoc body inside it (a && before the body) is never edited
        self.sealed: set[int] = set()
        for hs, he in self.heredoc_spans:
            line = self.line_of(hs)
            for g, (a, b) in enumerate(self.groups):
                if a < line <= b:
                    self.sealed.add(g)
        self.simples_by_group: dict[int, list[Simple]] = {}
        for s in self.simples:
            s.group = self.group_of_tok[s.first]
            self.simples_by_group.setdefault(s.group, []).append(s)
        self.by_words: dict[tuple[str, ...], list[Simple]] = {}
        self.simples_by_command: dict[str, list[Simple]] = {}
        for s in self.simples:
            self.by_words.setdefault(tuple(self.toks[i].text for i in s.words), []).append(s)
            if s.words:
                self.simples_by_command.setdefault(self.toks[s.words[0]].text, []).append(s)

    def text(self, i: int) -> str:
        return self.toks[i].text

    def value(self, i: int) -> str | None:
        return word_value(self.toks[i].text)


def command_name(unit: ShellUnit, s: Simple) -> str | None:
    if not s.words:
        return None
    v = unit.value(s.words[0])
    return v.rsplit("/", 1)[-1] if v else None


@dataclass
class Assignment:
    tok: int
    name: str
    value: str | None  # raw text after "=", None for `export NAME` / `unset NAME`
    form: str  # "prefix" (X=1 cmd / X=1 alone), "export", "unset", "env"; "append" (X+=1: see appends)


_ENV_FLAGS = {"-i", "--ignore-environment", "-0", "--null", "-v", "--debug", "-"}
_ENV_FLAGS_WITH_VALUE = {"-u", "--unset", "-C", "--chdir"}


def env_operands(unit: ShellUnit, s: Simple) -> tuple[list[int], bool] | None:
    """For `env [options] A=1 ... cmd`: (assignment operand tokens, has options); None if unsure."""
    ops: list[int] = []
    options = False
    k = 1
    words = s.words
    while k < len(words):
        text = unit.text(words[k])
        if ops or not text.startswith("-"):
            break
        options = True
        if text == "--":
            k += 1
            break
        if text in _ENV_FLAGS or text.startswith(("--unset=", "--chdir=")):
            k += 1
        elif text in _ENV_FLAGS_WITH_VALUE:
            k += 2
        else:
            return None
    while k < len(words) and ASSIGN_RE.match(unit.text(words[k])):
        ops.append(words[k])
        k += 1
    return ops, options


def assignments(unit: ShellUnit, s: Simple) -> list[Assignment]:
    """Environment assignments of a simple command, in every form the rules edit."""
    out: list[Assignment] = []
    for i in s.assigns:
        m = ASSIGN_RE.match(unit.text(i))
        if m and not m.group(2) and not m.group(3):
            out.append(Assignment(i, m.group(1), unit.text(i)[m.end():], "prefix"))
    name = command_name(unit, s)
    if name in ("export", "unset"):
        operands = s.words[1:]
        for i in operands:
            text = unit.text(i)
            if text.startswith("-") and not (name == "unset" and text == "-v"):
                return out  # options (-n, -f, -p): not a plain export/unset
        for i in operands:
            text = unit.text(i)
            m = ASSIGN_RE.match(text)
            if name == "export" and m and not m.group(2) and not m.group(3):
                out.append(Assignment(i, m.group(1), text[m.end():], "export"))
            elif NAME_RE.match(text):
                out.append(Assignment(i, text, None, name))
    elif name == "env":
        found = env_operands(unit, s)
        if found is not None:
            for i in found[0]:
                m = ASSIGN_RE.match(unit.text(i))
                if m and not m.group(2) and not m.group(3):
                    out.append(Assignment(i, m.group(1), unit.text(i)[m.end():], "env"))
    return out


def appends(unit: ShellUnit, s: Simple) -> list[Assignment]:
    """The ``NAME+=value`` words of a simple command (alone, before a command, or ``export NAME+=value``):
    they add to the value the variable had, so :func:`assignments` (whole values) leaves them out; form
    "append"."""
    words = list(s.assigns)
    if command_name(unit, s) == "export":
        words += s.words[1:]
    out = []
    for i in words:
        m = ASSIGN_RE.match(unit.text(i))
        if m and m.group(3) and not m.group(2):
            out.append(Assignment(i, m.group(1), unit.text(i)[m.end():], "append"))
    return out


def references(text: str, name: str) -> bool:
    return re.search(r"\$\{?" + re.escape(name) + r"(?![A-Za-z0-9_])", text) is not None


# ------------------------------------------------------------------------------------------------
# Rendering: token deletions and replacements -> new lines


def deletion_span(src: str, start: int, end: int) -> tuple[int, int]:
    """The characters to delete for a run of tokens [start, end): the run, plus the blanks after it
    when more code follows on its line, else the blanks before it (never the indentation)."""
    line_end = src.find("\n", end)
    line_end = len(src) if line_end < 0 else line_end
    j = end
    while j < line_end and src[j] in " \t":
        j += 1
    rest = src[j:line_end]
    if rest and rest != "\\" and not rest.startswith("#"):
        return start, j
    line_start = src.rfind("\n", 0, start) + 1
    k = start
    while k > line_start and src[k - 1] in " \t":
        k -= 1
    return (start if k == line_start else k), end


def _odd_backslashes(text: str) -> bool:
    n = len(text) - len(text.rstrip("\\"))
    return n % 2 == 1


def render(
    src: str,
    first: int,
    last_end: int,
    edits: list[tuple[int, int, str]],
    comments: list[tuple[int, int]],
) -> list[str]:
    """Apply char edits (start, end, replacement) to src[first:last_end] and return its lines.

    Lines that the edits emptied (nothing left but blanks, a continuation backslash or a comment)
    are dropped; a line that continued into a dropped last line stops continuing; a continuation
    line that becomes the first line of its command takes the indentation of the dropped line."""
    in_comment = [False] * (last_end - first)
    for cs, ce in comments:
        for k in range(max(cs, first), min(ce, last_end)):
            in_comment[k - first] = True
    def indent_at(k: int) -> str:
        line_start = src.rfind("\n", 0, k) + 1
        j = line_start
        while j < len(src) and src[j] in " \t":
            j += 1
        return src[line_start:j]

    lines: list[dict] = []
    cur: dict = {"text": [], "code": [], "touched": False, "comment": False, "indent": indent_at(first)}

    def close(k: int) -> None:
        lines.append(dict(cur))
        cur.update(text=[], code=[], touched=False, comment=False, indent=indent_at(k + 1))

    def copy(a: int, b: int) -> None:
        for k in range(a, b):
            ch = src[k]
            if ch == "\n":
                close(k)
                continue
            cur["text"].append(ch)
            if in_comment[k - first]:
                cur["comment"] = True
            else:
                cur["code"].append(ch)

    pos = first
    for s, e, new in sorted(edits):
        if s < pos:
            raise ValueError("overlapping edits")
        copy(pos, s)
        cur["touched"] = True
        for n, part in enumerate(new.split("\n")):
            if n:  # an inserted text with a line break (a new continuation line)
                close(s - 1)
                cur["touched"] = True
            cur["text"].extend(part)
            cur["code"].extend(part)
        pos = e
    copy(pos, last_end)
    lines.append(dict(cur))

    out: list[str] = []
    out_cont: list[bool] = []  # does out[k] continue on the next line?
    pending_indent: str | None = None
    for line in lines:
        text = "".join(line["text"])
        code = "".join(line["code"]).strip()
        if line["touched"] and code in ("", "\\"):
            if out and out_cont[-1]:
                if code != "\\":
                    # the dropped line ended the command: the line before stops continuing
                    out[-1] = out[-1][:-1].rstrip(" \t")
                    out_cont[-1] = False
            elif pending_indent is None:
                # the next line starts the command now: it takes this line's indentation
                pending_indent = line["indent"]
            continue
        if pending_indent is not None:
            text = pending_indent + text.lstrip(" \t")
            pending_indent = None
        out.append(text)
        out_cont.append(not line["comment"] and _odd_backslashes(text))
    return out


# ------------------------------------------------------------------------------------------------
# The plan shared by the rules of one unit

class Plan:
    """Edits that several rules make to the same unit, rendered together per statement group.

    Each rule adds its contributions, then calls :meth:`flush`, which (re-)renders every group
    that changed and hands the engine one line edit per group. A group first edited by one rule
    and then by another keeps a single engine edit, updated in place.
    """

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        #: line of the unit where ``lines`` start (a script embedded in a larger unit: a
        #: Dockerfile heredoc body); group ranges are relative, engine edits absolute
        self.offset = 0
        self.emitted: dict[int, LineEdit] = {}
        self.comments: dict[int, list[str]] = {}
        self.dirty: set[int] = set()
        self._ignores: dict[int, frozenset[str] | None] | None = None

    # -- silencing ------------------------------------------------------------------------------
    def silenced(self, rule: str, group: int) -> bool:
        if self._ignores is None:
            self._ignores = {
                i: ig for i, line in enumerate(self.lines) if "neuron-migrate" in line and (ig := ignored_rules(line)) is not None
            }
        a, b = self.group_range(group)
        return any(is_silenced(self._ignores.get(i), rule) for i in range(a, b + 1))

    # -- to implement ---------------------------------------------------------------------------
    def group_range(self, group: int) -> tuple[int, int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def render_group(self, group: int) -> list[str] | None:  # pragma: no cover - abstract
        """New lines of the group (without inserted comments), None when unchanged."""
        raise NotImplementedError

    def touched_groups(self) -> Iterable[int]:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------
    def add_comment(self, group: int, text: str) -> None:
        items = self.comments.setdefault(group, [])
        if text not in items:
            items.append(text)
            self.dirty.add(group)

    def marker(self, ctx, group: int, message: str, line: int | None = None, detail: str | None = None) -> None:
        """A manual-action marker above the group's first line, stacked with the markers other rules put
        there in this run (``detail``: its long form, see ``TextContext.marker``). Every marker reported
        is written, except above a command replaced by an explanatory comment, and where an earlier run
        already stacked markers there without this one (a second run adds nothing: it reports it)."""
        line = self.group_range(group)[0] if line is None else line
        if self.silenced(ctx.rule_id, group):
            return
        at = line + self.offset
        stack = ctx.markers_above(at)
        taken = bool(stack) and marker_text(ctx.rule_id, message) not in stack
        if group in self.comments or taken:
            ctx.finding(at, message, "manual", detail=detail)
            return
        ctx.marker(at, message, detail=detail)

    def flush(self, ctx) -> None:
        for g in sorted(set(self.touched_groups())):
            a, b = self.group_range(g)
            new = self.render_group(g)
            orig = self.lines[a : b + 1]
            new = list(orig) if new is None else new
            if g in self.comments:
                indent = orig[0][: len(orig[0]) - len(orig[0].lstrip(" \t"))]
                new = [indent + c for c in self.comments[g]] + new
            p = 0
            while p < len(orig) and p < len(new) and orig[p] == new[p]:
                p += 1
            q = 0
            while q < len(orig) - p and q < len(new) - p and orig[-1 - q] == new[-1 - q]:
                q += 1
            start, end, lines = a + p, b + 1 - q, new[p : len(new) - q]
            edit = self.emitted.get(g)
            if edit is None:
                if start == end and not lines:
                    continue
                self.emitted[g] = ctx.replace_lines(start + self.offset, end + self.offset, lines)
            else:  # one engine edit per group, whichever rule of the family made it first
                ctx.update_lines(edit, start + self.offset, end + self.offset, lines)


class ShellPlan(Plan):
    def __init__(self, unit: ShellUnit) -> None:
        super().__init__(unit.lines)
        self.unit = unit
        self.removed: dict[int, str] = {}  # id(simple) -> rule
        self.by_id = {id(s): s for s in unit.simples}
        self.deleted: dict[int, str] = {}  # token index -> rule
        self.replaced: dict[int, tuple[str, str]] = {}  # token index -> (rule, text)
        self._colons: set[int] = set()  # groups holding a designated `:` at the last flush
        #: id(simple) -> [(rule, text)] written before the first word that is left of the command
        self.prefixes: dict[int, list[tuple[str, str]]] = {}
        #: id(simple) -> [(rule, text, candidate tokens)] written after the last candidate left
        self.appends: dict[int, list[tuple[str, str, list[int]]]] = {}
        #: id(simple) of the launches of Python scripts NM515 edited (read by NM516)
        self.edited_launches: set[int] = set()

    def group_range(self, group: int) -> tuple[int, int]:
        return self.unit.groups[group]

    def editable(self, rule: str, s: Simple) -> bool:
        return s.group >= 0 and s.group not in self.unit.sealed and not self.silenced(rule, s.group)

    # -- contributions ----------------------------------------------------------------------------
    def remove(self, rule: str, s: Simple) -> None:
        self.removed.setdefault(id(s), rule)
        self.dirty.add(s.group)

    def delete(self, rule: str, tok: int) -> None:
        self.deleted.setdefault(tok, rule)
        self.dirty.add(self.unit.group_of_tok[tok])

    def replace(self, rule: str, tok: int, text: str) -> None:
        self.replaced.setdefault(tok, (rule, text))
        self.dirty.add(self.unit.group_of_tok[tok])

    def rewrite(self, rule: str, tok: int, text: str) -> None:
        """Replace a token's text, replacing what an earlier rewrite of it wrote (a word that the
        rules edit piece by piece, such as a variable's value)."""
        self.replaced[tok] = (rule, text)
        self.dirty.add(self.unit.group_of_tok[tok])

    def prefix(self, rule: str, s: Simple, text: str) -> None:
        """Write ``text`` (assignments such as ``TP_SIZE=8``) at the start of the command."""
        items = self.prefixes.setdefault(id(s), [])
        if all(t != text for _, t in items):
            items.append((rule, text))
            self.dirty.add(s.group)

    def append(self, rule: str, s: Simple, text: str, after: list[int]) -> None:
        """Write ``text`` right after the last token of ``after`` that is left (``text`` starts
        with its own separator: a blank, or `` \\\n<indent>`` for a new continuation line)."""
        items = self.appends.setdefault(id(s), [])
        if all(t != text for _, t, _ in items):
            items.append((rule, text, list(after)))
            self.dirty.add(s.group)

    def assignments(self, s: Simple) -> list[Assignment]:
        """:func:`assignments` of ``s`` as the command will run once the deletions contributed so far
        are rendered: the words a removed leading wrapper leaves at the start of the command are its
        prefix assignments then (``neuron_parallel_compile XLA_DOWNCAST_BF16=1 torchrun ...`` loses
        ``neuron_parallel_compile`` to NM511 and becomes ``XLA_DOWNCAST_BF16=1 torchrun ...``). A
        rule that reads assignments through the plan edits them in the same pass, so that the next
        run finds nothing left to do. The rules of the family run in id order: those that delete
        leading words (NM510, NM511) come before those that read assignments (NM512 and up)."""
        u = self.unit
        out = assignments(u, s)
        k = 0
        while k < len(s.words) and s.words[k] in self.deleted:
            k += 1
        if k == 0:
            return out
        for i in s.words[k:]:
            m = ASSIGN_RE.match(u.text(i))
            if not m or m.group(2) or m.group(3):
                break
            out.append(Assignment(i, m.group(1), u.text(i)[m.end():], "prefix"))
        return out

    def touched_groups(self) -> Iterable[int]:
        """Groups to render again: those contributed to since the last flush, and those where a
        designated `:` appeared or went."""
        self._designated = {id(s) for s in self._designated_colons()}
        colons = {self.by_id[k].group for k in self._designated}
        out = self.dirty | (colons ^ self._colons)
        self._colons = colons
        self.dirty = set()
        return out

    # -- state after every contribution -------------------------------------------------------------
    def is_removed(self, s: Simple) -> bool:
        if id(s) in self.removed:
            return True
        u = self.unit
        assigns = [i for i in s.assigns if i not in self.deleted]
        words = [i for i in s.words if i not in self.deleted]
        if assigns:
            return False
        if not words:
            return bool(s.assigns or s.words) and any(i in self.deleted for i in s.assigns + s.words)
        name = command_name(u, s)
        if name in ("export", "unset", "env") and words[0] == s.words[0]:
            # nothing left but the command and its options
            return any(i in self.deleted for i in s.words[1:]) and all(u.text(i).startswith("-") for i in words[1:])
        return False

    def dropped_env(self, s: Simple) -> bool:
        """`env A=1 cmd` whose assignments all went: `env` goes too."""
        u = self.unit
        if command_name(u, s) != "env" or s.words[0] in self.deleted:
            return False
        found = env_operands(u, s)
        if not found:
            return False
        ops, options = found
        rest = [i for i in s.words[1 + len(ops):]]
        return bool(ops) and not options and all(i in self.deleted for i in ops) and bool(rest)

    def _designated_colons(self) -> list[Simple]:
        """In a body that must keep a command and lost all of them, the first one becomes `:`."""
        out = []
        for body in self.unit.bodies:
            if not body.nonempty or not body.items:
                continue
            every = []
            for ao in body.items:
                for p in ao.pipelines:
                    every.extend(p.cmds)
            if every and all(isinstance(c, Simple) and self.is_removed(c) for c in every):
                out.append(every[0])
        return out

    def _colon_mode(self, s: Simple, designated: set[int]) -> bool:
        p = s.pipeline
        ao = p.andor
        if len(p.cmds) > 1 or p.bang or p.timed or s.heredoc or id(s) in designated:
            return True
        k = ao.pipelines.index(p)
        near = []
        if k > 0:
            near.append(ao.ops[k - 1])
        if k < len(ao.ops):
            near.append(ao.ops[k])
        return any(self.unit.text(i) == "||" for i in near)

    def render_group(self, group: int) -> list[str] | None:
        u = self.unit
        a, b = u.groups[group]
        designated = getattr(self, "_designated", None)
        if designated is None:
            designated = {id(s) for s in self._designated_colons()}
        dels: set[int] = set()
        char_edits: list[tuple[int, int, str]] = []
        modes: dict[int, str] = {}
        chains: dict[int, AndOr] = {}
        for s in u.simples_by_group.get(group, ()):
            if self.is_removed(s):
                if self._colon_mode(s, designated):
                    modes[id(s)] = "colon"
                    span = [i for i in s.assigns + s.words]
                    lo, hi = u.toks[min(span)].start, u.toks[max(span)].end
                    if any(lo <= u.toks[r].start < hi and u.text(r) in ("<<", "<<-") for r in s.redirs):
                        continue
                    char_edits.append((lo, hi, ":"))
                else:
                    modes[id(s)] = "clean"
                    dels.update(range(s.first, s.last + 1))
                    chains[id(s.pipeline.andor)] = s.pipeline.andor
                continue
            for i in s.assigns + s.words:
                if i in self.deleted:
                    dels.add(i)
                elif i in self.replaced:
                    char_edits.append((u.toks[i].start, u.toks[i].end, self.replaced[i][1]))
            dropped = self.dropped_env(s)
            if dropped:
                dels.add(s.words[0])
            left = [i for i in sorted(s.assigns + s.words)
                    if i not in self.deleted and not (dropped and i == s.words[0])]
            pre = self.prefixes.get(id(s))
            if pre and left:
                start = u.toks[left[0]].start
                char_edits.append((start, start, "".join(t + " " for _, t in pre)))
            for _, text, after in self.appends.get(id(s), ()):
                kept = [i for i in after if i in left]
                if kept:
                    end = u.toks[kept[-1]].end
                    char_edits.append((end, end, text))
        for ao in chains.values():
            pipes = ao.pipelines
            gone = {
                k for k, p in enumerate(pipes)
                if len(p.cmds) == 1 and isinstance(p.cmds[0], Simple) and modes.get(id(p.cmds[0])) == "clean"
            }
            kept = [k for k in range(len(pipes)) if k not in gone]
            if not kept:
                dels.update(ao.ops)
                first = pipes[0].cmds[0].first  # type: ignore[union-attr]
                if ao.sep is not None:
                    dels.add(ao.sep)
                elif first > 0 and u.toks[first - 1].kind == "op" and u.text(first - 1) == ";":
                    dels.add(first - 1)
                continue
            for k in gone:
                dels.add(ao.ops[k - 1] if any(j < k for j in kept) else ao.ops[k])
        # runs of consecutive deleted tokens
        run: list[int] = []
        for i in sorted(dels) + [None]:
            if run and (i is None or i != run[-1] + 1):
                char_edits.append((*deletion_span(u.src, u.toks[run[0]].start, u.toks[run[-1]].end), ""))
                run = []
            if i is not None:
                run.append(i)
        if not char_edits:
            return None
        char_edits = _merge(char_edits)
        first = u.line_starts[a]
        last_end = u.line_starts[b] + len(u.lines[b])
        k = bisect.bisect_left(u.comments, (first, -1))
        comments = []
        while k < len(u.comments) and u.comments[k][0] < last_end:
            comments.append(u.comments[k])
            k += 1
        return render(u.src, first, last_end, char_edits, comments)


def _merge(edits: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    for s, e, t in sorted(edits):
        if out and s < out[-1][1]:
            ps, pe, pt = out[-1]
            if t or pt:
                continue  # a replacement inside a deletion (or the reverse): the first wins
            out[-1] = (ps, max(pe, e), "")
        else:
            out.append((s, e, t))
    return out


_PLANS: "weakref.WeakKeyDictionary[object, object]" = weakref.WeakKeyDictionary()


def plan_for(ctx, build: Callable[[list[str]], Plan]) -> Plan | None:
    """The plan of this unit, built (once) by the first rule of the family that runs."""
    try:
        plan = _PLANS[ctx]
    except KeyError:
        try:
            plan = build(ctx.lines)
        except (ShellSyntaxError, RecursionError, ValueError):
            plan = None
            if ctx.kind == "shell" and ctx.path is not None and _OLD_STACK_WORDS.search(ctx.text):
                # a whole script the family cannot read (an unclosed `if`): said in the file, not skipped silently
                at = 1 if ctx.lines and ctx.lines[0].startswith("#!") and len(ctx.lines) > 1 else 0
                if UNPARSED_MARKER in ctx.text:  # (an earlier run wrote it: reported, not written again)
                    ctx.finding(at, UNPARSED_MARKER, "manual")
                else:
                    ctx.marker(at, UNPARSED_MARKER)
        _PLANS[ctx] = plan
    return plan  # type: ignore[return-value]


#: a shell script the rules cannot parse, which names the old stack (marked by the first rule that reads it)
UNPARSED_MARKER = "Migrate this script by hand: the shell rules cannot parse it (check it with bash -n)."
_OLD_STACK_WORDS = re.compile(r"\bXLA_[A-Z0-9_]+|\bNEURON_[A-Z0-9_]+|neuron_parallel_compile|optimum-cli|torch_xla|"
                              r"optimum[-.]neuron|neuronx[-_]distributed|transformers[-_]neuronx")


def _shell_plan(lines: list[str]) -> ShellPlan:
    return ShellPlan(ShellUnit(lines))


class ShellRule(TextRule):
    kinds = ("shell",)

    def apply(self, ctx) -> None:
        plan = plan_for(ctx, _shell_plan)
        if not isinstance(plan, ShellPlan):
            return
        self.contribute(plan, ctx)
        plan.flush(ctx)

    def contribute(self, plan: ShellPlan, ctx) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def finding(self, ctx, plan: ShellPlan, tok: int, message: str, fix: str = "applied") -> None:
        u = plan.unit
        ctx.finding(u.line_of(u.toks[tok].start), message, fix, u.col_of(u.toks[tok].start) + 1)


# ------------------------------------------------------------------------------------------------
# Scripts inside words: `bash -c '...'`, `sh -lc "..."`, `eval '...'`

_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
_SHELL_C = re.compile(r"-[A-Za-z]*c[A-Za-z]*\Z")


def branch_tests(unit: ShellUnit, s: Simple) -> list[tuple[str, list[str]]]:
    """The branches of ``if`` statements that command ``s`` runs in, innermost first: (the branch's test, the
    text between ``if``/``elif`` and ``then``, or "" for an ``else`` branch; the tests of the branches before it)."""
    return unit.branch_tests_by_first.get(s.first, [])


def _all_branch_tests(unit: ShellUnit) -> dict[int, list[tuple[str, list[str]]]]:
    """``branch_tests`` of every command of ``unit`` (keyed by its first token), in one pass over the tokens."""
    starts = {other.first for other in unit.simples}
    covered: set[int] = set()  # (a command's own words are never the `if` syntax)
    for other in unit.simples:
        covered.update(range(other.first, other.last + 1))
    out: dict[int, list[tuple[str, list[str]]]] = {}
    # per open `if`: [index of its if/elif token, this branch's test (None before its `then`), the earlier tests]
    open_ifs: list[list] = []
    for i, tok in enumerate(unit.toks):
        if i in starts:
            out[i] = [(test, list(earlier)) for _i, test, earlier in reversed(open_ifs) if test is not None]
        if tok.kind != "word" or i in covered:
            continue
        if tok.text == "if":
            open_ifs.append([i, None, []])
        elif open_ifs and tok.text == "elif":
            frame = open_ifs[-1]
            frame[2].append(frame[1] or "")
            frame[0], frame[1] = i, None
        elif open_ifs and tok.text == "then":
            open_ifs[-1][1] = unit.src[unit.toks[open_ifs[-1][0]].end:tok.start].strip()
        elif open_ifs and tok.text == "else":
            frame = open_ifs[-1]
            frame[2].append(frame[1] or "")
            frame[1] = ""
        elif open_ifs and tok.text == "fi":
            open_ifs.pop()
    return out


#: a branch test that selects another device than Neuron (`[ "$DEVICE" == "cpu" ]`, `[[ $ACCEL = cuda ]]`)
_OTHER_DEVICE_TEST = re.compile(r"""(?i)(?:==?|-eq)\s*['"]?(?:cpu|cuda|gpu|rocm|mps|tpu|nvidia)\b['"]?""")
#: one that selects Neuron (`[ "$DEVICE" == "xla" ]`, `[ -e /dev/neuron0 ]`)
_NEURON_TEST = re.compile(r"(?i)neuron|\bxla\b|\binf[12]\b|\btrn[123]\b|trainium|inferentia")


def for_another_device(unit: ShellUnit, s: Simple) -> bool:
    """Whether command ``s`` runs in a branch for another device than Neuron (a hardware-agnostic script's `cpu`
    or `cuda` branch, or the `else` of a test for Neuron): what it installs or sets is not the Neuron path's."""
    for test, earlier in branch_tests(unit, s):
        if _NEURON_TEST.search(test):
            return False
        if _OTHER_DEVICE_TEST.search(test) or (not test and any(_NEURON_TEST.search(t) for t in earlier)):
            return True
    return False


def launched_source(ctx, script: str) -> str | None:
    """The launched script's source, read beside the launcher or, for a path relative to the project's root
    (``examples/train.py`` in a launcher under ``scripts/``), beside one of its three nearest parent folders;
    None where it cannot be read."""
    path = getattr(ctx, "path", None)
    if path is None or "$" in script or script.startswith(("/", "~")):
        return None
    for folder in [path.parent, *path.parent.parents][:4]:
        try:
            return (folder / script).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return None


def embedded_scripts(unit: ShellUnit, s: Simple) -> list[int]:
    """Tokens of ``s`` that hold a script another shell runs: the operand of ``bash -c`` (also
    behind a launcher: ``srun bash -c ...``), the single operand of ``eval`` and the job of ``sbatch
    --wrap`` (``--wrap="srun ..."``: the token as a whole)."""
    vals = [unit.value(i) for i in s.words]
    if not vals:
        return []
    if vals[0] == "eval":
        return s.words[1:2] if len(s.words) == 2 else []
    if vals[0] == "sbatch":
        for k, i in enumerate(s.words):
            text = unit.text(i)
            if text.startswith("--wrap="):
                return [i]
            if text == "--wrap" and k + 1 < len(s.words):
                return [s.words[k + 1]]
        return []
    if vals[0] in ("echo", "printf", "cat", "grep", ":"):
        return []
    for k, v in enumerate(vals):
        if v is None or v.rsplit("/", 1)[-1] not in _SHELLS:
            continue
        j = k + 1
        while j < len(vals) and vals[j] is not None and vals[j].startswith("-"):
            if _SHELL_C.match(vals[j]) and not vals[j].startswith("--"):
                return s.words[j + 1: j + 2]
            j += 1
        return []
    return []


def literal_script(text: str) -> tuple[str, str] | None:
    """(quote, script) of a word that is one quoted literal the migration can re-quote exactly:
    ``'...'`` without a quote inside, or ``"..."`` without ``"``, ``\\``, backticks or ``$``."""
    if len(text) < 2 or text[0] != text[-1] or text[0] not in "\"'":
        return None
    body = text[1:-1]
    if text[0] == "'" and "'" not in body:
        return "'", body
    if text[0] == '"' and not any(c in body for c in '"\\`$'):
        return '"', body
    return None


def rewrite_script(script: str, edit: Callable[["ShellPlan"], bool]) -> str | None:
    """``script`` after ``edit`` contributed to a plan of its own (None: it does not parse, or
    ``edit`` changed nothing)."""
    lines = script.split("\n")
    try:
        plan = ShellPlan(ShellUnit(lines))
    except (ShellSyntaxError, RecursionError, ValueError):
        return None
    if not edit(plan):
        return None
    out = list(lines)
    for g in sorted(set(plan.touched_groups()), reverse=True):
        new = plan.render_group(g)
        if new is not None:
            a, b = plan.group_range(g)
            out[a: b + 1] = new
    return "\n".join(out)
