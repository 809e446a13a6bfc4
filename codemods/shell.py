"""NM510-NM514: launch, Slurm and shell scripts.

Shell units are ``.sh``/``.slurm`` files, notebook ``!`` lines and ``%%bash`` cells, and bash fences
of Markdown documents. Every unit is lexed and parsed once (a small bash lexer/parser that knows
quotes, ``\\`` continuations, ``$(...)``/``${...}``/backticks, arrays, heredocs, comments and the
compound commands) and the rules of this module edit the commands they understand, word by word,
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

The lexer/parser and the plan are also used by :mod:`codemods.dockerfile` (``ENV`` lines) and by
:mod:`codemods.launch_flags` (NM515-NM516, NM523), which also writes new words through the plan:
:meth:`ShellPlan.prefix` (``TP_SIZE=8`` before the first word left of a command) and
:meth:`ShellPlan.append` (``--torch_compile true`` after the last argument left, on a new
continuation line when the command is continued), placed when the group is rendered so that
they compose with the deletions of the other rules.
"""

from __future__ import annotations

import bisect
import re
import shlex
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable

from migrator.model import ignored_rules, is_silenced
from migrator.rules import TextRule
from migrator.text_engine import LineEdit

# ------------------------------------------------------------------------------------------------
# What the rules know about the old stack

#: Environment variables that only the XLA stack (torch-xla, torch-neuronx XLA, libneuronxla) or
#: optimum-neuron itself reads. Value: why it can go (shown in findings).
XLA_ONLY_VARS: dict[str, str] = {
    "XLA_USE_BF16": "XLA-only bf16 switch (phased out since Neuron 2.23); load the model with "
    "dtype=torch.bfloat16 or train with bf16=True instead",
    "XLA_DOWNCAST_BF16": "XLA-only bf16 switch (phased out since Neuron 2.23); load the model with "
    "dtype=torch.bfloat16 or train with bf16=True instead",
    "XLA_USE_32BIT_LONG": "torch-xla setting",
    "XLA_IR_DEBUG": "torch-xla debugging",
    "XLA_HLO_DEBUG": "torch-xla debugging",
    "XLA_FLAGS": "XLA compiler flags",
    "XLA_SAVE_TENSORS_FILE": "torch-xla debugging",
    "XLA_SAVE_TENSORS_FMT": "torch-xla debugging",
    "XLA_SAVE_HLO_FILE": "torch-xla debugging",
    "XLA_METRICS_FILE": "torch-xla debugging",
    "XLA_DUMP_FATAL_STACK": "torch-xla debugging",
    "XLA_SYNC_TENSORS_OPBYOP": "torch-xla debugging",
    "XLA_GET_TENSORS_OPBYOP": "torch-xla debugging",
    "XLA_DISABLE_FUNCTIONALIZATION": "torch-xla setting",
    "XLA_NO_SPECIAL_SCALARS": "torch-xla setting",
    "XLA_IR_SHAPE_CACHE_SIZE": "torch-xla setting",
    "XLA_TRIM_GRAPH_SIZE": "torch-xla setting",
    "PT_XLA_DEBUG": "torch-xla debugging",
    "PT_XLA_DEBUG_LEVEL": "torch-xla debugging",
    "PT_XLA_DEBUG_FILE": "torch-xla debugging",
    "PJRT_DEVICE": "torch-xla device selection (the device is now `neuron`)",
    "NEURON_FUSE_SOFTMAX": "XLA lowering option of torch-neuronx",
    "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS": "legacy async mode of the XLA stack (AWS: remove it)",
    "NEURON_NUM_RECENT_MODELS_TO_KEEP": "graph cache setting of the XLA stack",
    "NEURON_FRAMEWORK_DEBUG": "torch-neuronx (XLA) debugging",
    "NEURON_PLATFORM_TARGET_OVERRIDE": "optimum-neuron export target",
    "OPTIMUM_DISABLE_ARGUMENT_PATCH": "optimum-neuron setting",
    "OPTIMUM_DISABLE_STRICT_MODE": "optimum-neuron setting",
    "DISABLE_TRANSFORMERS_PATCHING": "optimum-neuron setting",
    "CUSTOM_CACHE_REPO": "optimum-neuron compile cache setting",
    "ACCELERATE_USE_AMP": "optimum-neuron setting (set bf16=True in the training arguments instead)",
}
#: every variable with this prefix belongs to optimum-neuron
XLA_ONLY_PREFIXES = ("OPTIMUM_NEURON_",)


def xla_only_reason(name: str) -> str | None:
    if name in XLA_ONLY_VARS:
        return XLA_ONLY_VARS[name]
    if name.startswith(XLA_ONLY_PREFIXES):
        return "optimum-neuron setting"
    return None


#: neuronx-cc flags that only made sense for the XLA training pipeline (removed); value: takes an argument
CC_DROP_FLAGS = {
    "--model-type": True,
    "--distribution-strategy": True,
    "--cache_dir": True,
    "--retry_failed_compilation": False,
}
#: neuronx-cc flags of the XLA era that change numerics: kept, and flagged for a person to check
CC_CHECK_FLAGS = (
    "--auto-cast",
    "--auto-cast-type",
    "--enable-saturate-infinity",
    "--enable-mixed-precision-accumulation",
)


def comment_line(rule: str, text: str) -> str:
    """An explanatory comment written by a rule (never a manual-action marker, never an ignore)."""
    return f"# neuron-migrate {rule}: {' '.join(text.split())}"


# ------------------------------------------------------------------------------------------------
# Lexer


class ShellSyntaxError(Exception):
    """The unit is not shell text this module understands; it is left alone."""


_OPS = (";;&", "<<<", "<<-", "&>>", ";;", ";&", "&&", "||", "|&", "&>", "<<", "<>", "<&", ">&", ">>", ">|",
        "|", "&", ";", "(", ")", "<", ">")
REDIRS = frozenset({"<", ">", ">>", "<<", "<<-", "<<<", "<>", "<&", ">&", "&>", "&>>", ">|"})
_WORD_END = frozenset(" \t\n|&;()<>")
_ARRAY_ASSIGN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
ASSIGN_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: words after which the next word is again in command position
_CMD_PREFIX_WORDS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "!", "{", "time", "for"})


@dataclass
class Tok:
    kind: str  # "word" | "op" | "nl" | "arith"
    text: str
    start: int
    end: int
    fd: bool = False  # digits glued to the redirection that follows (2>&1)


class Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.n = len(src)
        self.pending: list[tuple[str, bool]] = []
        self.heredoc_spans: list[tuple[int, int]] = []
        self.comments: list[tuple[int, int]] = []

    def tokens(self) -> list[Tok]:
        toks, _ = self._lex(0, nested=False)
        return toks

    def _lex(self, i: int, nested: bool) -> tuple[list[Tok], int]:
        src, n = self.src, self.n
        toks: list[Tok] = []
        depth = 0
        cases = 0
        cmd_start = True
        while i < n:
            c = src[i]
            if c in " \t":
                i += 1
                continue
            if c == "\\" and src.startswith("\n", i + 1):
                i += 2
                continue
            if c == "\n":
                toks.append(Tok("nl", "\n", i, i + 1))
                i += 1
                if self.pending:
                    i = self._heredocs(i)
                cmd_start = True
                continue
            if c == "#":
                j = src.find("\n", i)
                j = n if j < 0 else j
                if not nested:
                    self.comments.append((i, j))
                i = j
                continue
            if c in "<>" and src.startswith("(", i + 1):  # process substitution <(...) >(...)
                j = self._word(i)
                toks.append(Tok("word", src[i:j], i, j))
                i = j
                cmd_start = False
                continue
            if src.startswith("((", i) and cmd_start:  # arithmetic command (( ... ))
                j = self._arith(i + 2, 2)
                toks.append(Tok("arith", src[i:j], i, j))
                i = j
                cmd_start = False
                continue
            op = next((o for o in _OPS if src.startswith(o, i)), None)
            if op is not None:
                if nested and op == "(":
                    depth += 1
                elif nested and op == ")":
                    if depth == 0 and cases == 0:
                        return toks, i + 1
                    if depth > 0:
                        depth -= 1
                toks.append(Tok("op", op, i, i + len(op)))
                i += len(op)
                if op in ("<<", "<<-"):
                    while i < n and src[i] in " \t":
                        i += 1
                    if i >= n or src[i] in _WORD_END:
                        raise ShellSyntaxError("heredoc without a delimiter")
                    j = self._word(i)
                    word = src[i:j]
                    toks.append(Tok("word", word, i, j))
                    self.pending.append((re.sub(r"""['"\\]""", "", word), op == "<<-"))
                    i = j
                cmd_start = op not in REDIRS and op != ")"
                continue
            j = self._word(i)
            word = src[i:j]
            tok = Tok("word", word, i, j)
            if word.isdigit() and j < n and src[j] in "<>":
                tok.fd = True
            toks.append(tok)
            if cmd_start and word == "case":
                cases += 1
            elif cmd_start and word == "esac":
                cases = max(0, cases - 1)
            cmd_start = word in _CMD_PREFIX_WORDS
            i = j
        if nested:
            raise ShellSyntaxError("unterminated $(")
        if self.pending:
            raise ShellSyntaxError("heredoc delimited by end of file")
        return toks, i

    def _heredocs(self, i: int) -> int:
        src, n = self.src, self.n
        for delim, strip_tabs in self.pending:
            start = i
            while True:
                if i >= n:
                    raise ShellSyntaxError("heredoc delimited by end of file")
                j = src.find("\n", i)
                j = n if j < 0 else j
                line = src[i:j]
                i = j + 1 if j < n else n
                if (line.lstrip("\t") if strip_tabs else line) == delim:
                    break
            self.heredoc_spans.append((start, i))
        self.pending = []
        return i

    def _word(self, i: int) -> int:
        src, n = self.src, self.n
        start = i
        if src[i] in "<>" and src.startswith("(", i + 1):
            _, i = self._lex(i + 2, nested=True)
        while i < n:
            c = src[i]
            if c in _WORD_END:
                if c == "(" and _ARRAY_ASSIGN_RE.fullmatch(src[start:i]):
                    i = self._array(i + 1)
                    continue
                break
            if c == "\\":
                i += 2
                continue
            if c == "'":
                i = self._squote(i + 1)
                continue
            if c == '"':
                i = self._dquote(i + 1)
                continue
            if c == "`":
                i = self._backtick(i + 1)
                continue
            if c == "$":
                i = self._dollar(i, in_dq=False)
                continue
            i += 1
        if i == start:
            raise ShellSyntaxError(f"unexpected {src[i]!r}")
        return min(i, n)

    def _dollar(self, i: int, in_dq: bool) -> int:
        src = self.src
        if src.startswith("$((", i):
            return self._arith(i + 3, 2)
        if src.startswith("$(", i):
            _, j = self._lex(i + 2, nested=True)
            return j
        if src.startswith("${", i):
            return self._brace(i + 2, in_dq)
        if not in_dq and src.startswith("$'", i):
            return self._ansi(i + 2)
        if not in_dq and src.startswith('$"', i):
            return self._dquote(i + 2)
        return i + 1

    def _dquote(self, i: int) -> int:
        src, n = self.src, self.n
        while i < n:
            c = src[i]
            if c == "\\":
                i += 2
                continue
            if c == '"':
                return i + 1
            if c == "`":
                i = self._backtick(i + 1)
                continue
            if c == "$":
                i = self._dollar(i, in_dq=True)
                continue
            i += 1
        raise ShellSyntaxError('unterminated "')

    def _brace(self, i: int, in_dq: bool) -> int:
        src, n = self.src, self.n
        while i < n:
            c = src[i]
            if c == "\\":
                i += 2
                continue
            if c == "}":
                return i + 1
            if c == '"':
                i = self._dquote(i + 1)
                continue
            if c == "'" and not in_dq:
                i = self._squote(i + 1)
                continue
            if c == "`":
                i = self._backtick(i + 1)
                continue
            if c == "$":
                i = self._dollar(i, in_dq)
                continue
            i += 1
        raise ShellSyntaxError("unterminated ${")

    def _arith(self, i: int, depth: int) -> int:
        src, n = self.src, self.n
        while i < n:
            c = src[i]
            if c == "\\":
                i += 2
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            elif c == '"':
                i = self._dquote(i + 1)
                continue
            elif c == "'":
                i = self._squote(i + 1)
                continue
            elif c == "`":
                i = self._backtick(i + 1)
                continue
            elif c == "$" and src.startswith("${", i):
                i = self._brace(i + 2, False)
                continue
            i += 1
        raise ShellSyntaxError("unterminated arithmetic")

    def _squote(self, i: int) -> int:
        """After an opening ': the offset after the closing one (no escapes inside)."""
        j = self.src.find("'", i)
        if j < 0:
            raise ShellSyntaxError("unterminated '")
        return j + 1

    def _backtick(self, i: int) -> int:
        return self._until(i, "`")

    def _ansi(self, i: int) -> int:
        return self._until(i, "'")

    def _until(self, i: int, close: str) -> int:
        """After an opening ` or $': the offset after the closing one (backslash escapes inside)."""
        src, n = self.src, self.n
        while i < n:
            c = src[i]
            if c == "\\":
                i += 2
                continue
            if c == close:
                return i + 1
            i += 1
        raise ShellSyntaxError(f"unterminated {close}")

    def _array(self, i: int) -> int:
        src, n = self.src, self.n
        while i < n:
            c = src[i]
            if c in " \t\n":
                i += 1
                continue
            if c == "\\" and src.startswith("\n", i + 1):
                i += 2
                continue
            if c == ")":
                return i + 1
            if c == "#":
                j = src.find("\n", i)
                i = n if j < 0 else j
                continue
            i = self._word(i)
        raise ShellSyntaxError("unterminated array")


# ------------------------------------------------------------------------------------------------
# Parser


@dataclass(eq=False)
class Body:
    kind: str
    nonempty: bool
    items: list["AndOr"] = field(default_factory=list)


@dataclass(eq=False)
class AndOr:
    body: Body
    pipelines: list["Pipeline"] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)  # token indices of && / || between pipelines
    sep: int | None = None  # token index of a following ; or &


@dataclass(eq=False)
class Pipeline:
    andor: AndOr
    cmds: list[object] = field(default_factory=list)  # Simple | Compound
    bang: bool = False
    timed: bool = False


@dataclass(eq=False)
class Compound:
    first: int
    last: int


@dataclass(eq=False)
class Simple:
    pipeline: Pipeline
    first: int
    last: int = -1
    assigns: list[int] = field(default_factory=list)
    words: list[int] = field(default_factory=list)
    redirs: list[int] = field(default_factory=list)  # token indices of redirection operators, fds, targets
    heredoc: bool = False
    group: int = -1


class Parser:
    def __init__(self, toks: list[Tok]) -> None:
        self.t = toks
        self.i = 0
        self.simples: list[Simple] = []
        self.bodies: list[Body] = []

    def peek(self) -> Tok | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def _is_word(self, tok: Tok | None, *words: str) -> bool:
        return tok is not None and tok.kind == "word" and tok.text in words

    def _is_op(self, tok: Tok | None, *ops: str) -> bool:
        return tok is not None and tok.kind == "op" and tok.text in ops

    def skip_nl(self) -> None:
        while self.i < len(self.t) and self.t[self.i].kind == "nl":
            self.i += 1

    def expect_word(self, word: str) -> None:
        if not self._is_word(self.peek(), word):
            raise ShellSyntaxError(f"expected {word}")
        self.i += 1

    def program(self) -> Body:
        body = self.parse_list("top", False, (), ())
        if self.i != len(self.t):
            raise ShellSyntaxError(f"unexpected {self.t[self.i].text!r}")
        return body

    def parse_list(self, kind: str, nonempty: bool, stop_words: Iterable[str], stop_ops: Iterable[str]) -> Body:
        body = Body(kind, nonempty)
        self.bodies.append(body)
        while True:
            self.skip_nl()
            tok = self.peek()
            if tok is None or self._is_word(tok, *stop_words) or self._is_op(tok, *stop_ops):
                break
            ao = self.parse_and_or(body)
            body.items.append(ao)
            tok = self.peek()
            if tok is None:
                break
            if self._is_op(tok, ";", "&"):
                ao.sep = self.i
                self.i += 1
                continue
            if tok.kind == "nl" or self._is_op(tok, *stop_ops):
                continue
            raise ShellSyntaxError(f"unexpected {tok.text!r}")
        if nonempty and not body.items:
            raise ShellSyntaxError("empty command list")
        return body

    def parse_and_or(self, body: Body) -> AndOr:
        ao = AndOr(body)
        ao.pipelines.append(self.parse_pipeline(ao))
        while self._is_op(self.peek(), "&&", "||"):
            ao.ops.append(self.i)
            self.i += 1
            self.skip_nl()
            ao.pipelines.append(self.parse_pipeline(ao))
        return ao

    def parse_pipeline(self, ao: AndOr) -> Pipeline:
        p = Pipeline(ao)
        while True:
            if self._is_word(self.peek(), "!"):
                p.bang = True
                self.i += 1
            elif self._is_word(self.peek(), "time"):
                p.timed = True
                self.i += 1
                if self._is_word(self.peek(), "-p"):
                    self.i += 1
            else:
                break
        p.cmds.append(self.parse_command(p))
        while self._is_op(self.peek(), "|", "|&"):
            self.i += 1
            self.skip_nl()
            p.cmds.append(self.parse_command(p))
        return p

    def parse_command(self, p: Pipeline) -> object:
        tok = self.peek()
        if tok is None:
            raise ShellSyntaxError("missing command")
        first = self.i
        if tok.kind == "word":
            w = tok.text
            if w == "if":
                self.i += 1
                self.parse_list("cond", True, ("then",), ())
                self.expect_word("then")
                self.parse_list("then", True, ("elif", "else", "fi"), ())
                while self._is_word(self.peek(), "elif"):
                    self.i += 1
                    self.parse_list("cond", True, ("then",), ())
                    self.expect_word("then")
                    self.parse_list("then", True, ("elif", "else", "fi"), ())
                if self._is_word(self.peek(), "else"):
                    self.i += 1
                    self.parse_list("else", True, ("fi",), ())
                self.expect_word("fi")
                return self._compound_end(first)
            if w in ("while", "until"):
                self.i += 1
                self.parse_list("cond", True, ("do",), ())
                self._do_done()
                return self._compound_end(first)
            if w in ("for", "select"):
                self.i += 1
                tok = self.peek()
                if tok is None or tok.kind not in ("word", "arith"):
                    raise ShellSyntaxError("bad for")
                self.i += 1
                self.skip_nl()
                if self._is_word(self.peek(), "in"):
                    self.i += 1
                    while self.peek() is not None and self.peek().kind == "word":
                        self.i += 1
                if self._is_op(self.peek(), ";"):
                    self.i += 1
                self.skip_nl()
                if self._is_word(self.peek(), "{"):
                    self._brace_group()
                else:
                    self._do_done()
                return self._compound_end(first)
            if w == "case":
                self._case()
                return self._compound_end(first)
            if w == "{":
                self._brace_group()
                return self._compound_end(first)
            if w == "[[":
                self.i += 1
                while not self._is_word(self.peek(), "]]"):
                    if self.peek() is None:
                        raise ShellSyntaxError("unterminated [[")
                    self.i += 1
                self.i += 1
                return self._compound_end(first)
            if w == "function":
                self.i += 1
                if not (self.peek() and self.peek().kind == "word"):
                    raise ShellSyntaxError("bad function")
                self.i += 1
                if self._is_op(self.peek(), "(") and self._is_op(self._at(self.i + 1), ")"):
                    self.i += 2
                self.skip_nl()
                self.parse_command(p)
                return Compound(first, self.i - 1)
            if w in ("then", "do", "done", "fi", "elif", "else", "esac", "}", "]]"):
                raise ShellSyntaxError(f"unexpected {w}")
            if self._is_op(self._at(self.i + 1), "(") and self._is_op(self._at(self.i + 2), ")"):
                self.i += 3
                self.skip_nl()
                self.parse_command(p)
                return Compound(first, self.i - 1)
            return self.parse_simple(p)
        if tok.kind == "arith":
            self.i += 1
            return self._compound_end(first)
        if self._is_op(tok, "("):
            self.i += 1
            self.parse_list("sub", True, (), (")",))
            if not self._is_op(self.peek(), ")"):
                raise ShellSyntaxError("unterminated (")
            self.i += 1
            return self._compound_end(first)
        if tok.kind == "op" and tok.text in REDIRS:
            return self.parse_simple(p)
        raise ShellSyntaxError(f"unexpected {tok.text!r}")

    def _at(self, i: int) -> Tok | None:
        return self.t[i] if i < len(self.t) else None

    def _do_done(self) -> None:
        self.expect_word("do")
        self.parse_list("do", True, ("done",), ())
        self.expect_word("done")

    def _brace_group(self) -> None:
        self.expect_word("{")
        self.parse_list("brace", True, ("}",), ())
        self.expect_word("}")

    def _case(self) -> None:
        self.i += 1
        tok = self.peek()
        if tok is None or tok.kind != "word":
            raise ShellSyntaxError("bad case")
        self.i += 1
        self.skip_nl()
        self.expect_word("in")
        while True:
            self.skip_nl()
            if self._is_word(self.peek(), "esac"):
                self.i += 1
                return
            if self._is_op(self.peek(), "("):
                self.i += 1
            while True:
                tok = self.peek()
                if tok is None or tok.kind != "word":
                    raise ShellSyntaxError("bad case pattern")
                self.i += 1
                if self._is_op(self.peek(), "|"):
                    self.i += 1
                    continue
                if self._is_op(self.peek(), ")"):
                    self.i += 1
                    break
                raise ShellSyntaxError("bad case pattern")
            self.parse_list("case", False, ("esac",), (";;", ";&", ";;&"))
            if self._is_op(self.peek(), ";;", ";&", ";;&"):
                self.i += 1
            elif not self._is_word(self.peek(), "esac"):
                raise ShellSyntaxError("bad case item")

    def _redirections(self) -> list[int]:
        out = []
        while True:
            tok = self.peek()
            if tok is not None and tok.kind == "word" and tok.fd:
                out.append(self.i)
                self.i += 1
                continue
            if tok is not None and tok.kind == "op" and tok.text in REDIRS:
                out.append(self.i)
                self.i += 1
                target = self.peek()
                if target is None or target.kind != "word":
                    raise ShellSyntaxError("redirection without a target")
                out.append(self.i)
                self.i += 1
                continue
            return out

    def _compound_end(self, first: int) -> Compound:
        self._redirections()
        return Compound(first, self.i - 1)

    def parse_simple(self, p: Pipeline) -> Simple:
        s = Simple(p, self.i)
        while True:
            tok = self.peek()
            if tok is None or tok.kind == "nl":
                break
            if tok.kind == "op":
                if tok.text in REDIRS:
                    if tok.text in ("<<", "<<-"):
                        s.heredoc = True
                    s.redirs.extend(self._redirections())
                    continue
                break
            if tok.kind != "word":
                raise ShellSyntaxError("unexpected arithmetic")
            if tok.fd:
                s.redirs.extend(self._redirections())
                continue
            if not s.words and ASSIGN_RE.match(tok.text):
                s.assigns.append(self.i)
            else:
                s.words.append(self.i)
            self.i += 1
        s.last = self.i - 1
        if s.last < s.first:
            raise ShellSyntaxError("empty command")
        self.simples.append(s)
        return s


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
    form: str  # "prefix" (X=1 cmd / X=1 alone), "export", "unset", "env"


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
        self.marked: set[int] = set()
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

    def marker(self, ctx, group: int, message: str, line: int | None = None) -> None:
        """A manual-action marker above the group's first line; one per line across these rules."""
        line = self.group_range(group)[0] if line is None else line
        if self.silenced(ctx.rule_id, group):
            return
        if line in self.marked or group in self.comments:
            ctx.finding(line + self.offset, message, "manual")
            return
        self.marked.add(line)
        ctx.marker(line + self.offset, message)

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
        _PLANS[ctx] = plan
    return plan  # type: ignore[return-value]


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


def embedded_scripts(unit: ShellUnit, s: Simple) -> list[int]:
    """Tokens of ``s`` that hold a script another shell runs: the operand of ``bash -c`` (also
    behind a launcher: ``srun bash -c ...``) and the single operand of ``eval``."""
    vals = [unit.value(i) for i in s.words]
    if not vals:
        return []
    if vals[0] == "eval":
        return s.words[1:2] if len(s.words) == 2 else []
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


# ------------------------------------------------------------------------------------------------
# NM510: optimum-cli


_EXPORT_BOOL = {
    "--disable_neuron_cache", "--trust-remote-code", "--inline-weights-neff", "--disable-weights-neff-inline",
    "--disable-validation", "--dynamic-batch-size", "--output_hidden_states", "--output_attentions",
    "-O1", "-O2", "-O3", "--O1", "--O2", "--O3",
}
_EXPORT_MULTI = {
    "--lora_model_ids", "--lora_weight_names", "--lora_adapter_names", "--lora_scales", "--controlnet_ids",
    "--ip_adapter_id", "--ip_adapter_subfolder", "--ip_adapter_weight_name", "--ip_adapter_scale",
}
_SHAPE_FLAGS = (
    "--batch_size", "--text_batch_size", "--image_batch_size", "--sequence_length", "--num_beams",
    "--num_choices", "--num_channels", "--width", "--height", "--image_size", "--patch_size",
    "--num_images_per_prompt", "--audio_sequence_length",
)
_TP_FLAGS = ("--tensor_parallel_size", "--num_cores")
_DTYPE_FLAGS = ("--auto_cast_type", "--torch_dtype", "--auto_cast")
_DTYPES = {"bf16": "torch.bfloat16", "bfloat16": "torch.bfloat16", "fp16": "torch.float16",
           "float16": "torch.float16", "fp32": "torch.float32", "float32": "torch.float32",
           "tf32": "torch.float32"}
_LOAD_FLAGS = {"--trust-remote-code": "trust_remote_code=True", "--subfolder": "subfolder=",
               "--cache_dir": "cache_dir=", "--output_hidden_states": "output_hidden_states=True",
               "--output_attentions": "output_attentions=True"}
_PIPE_FLAGS = ("--unet",) + tuple(sorted(_EXPORT_MULTI))
_PYTHON_RE = re.compile(r"python[0-9.]*\Z")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def export_comments(args: list[str], command: str = "optimum-cli export neuron") -> list[str]:
    """Where each flag of a removed `optimum-cli export neuron ARGS` command now lives."""
    flags: list[tuple[str, str | None]] = []
    positional: list[str] = []
    k = 0
    while k < len(args):
        a = args[k]
        if a.startswith("-") and len(a) > 1 and not a.lstrip("-")[:1].isdigit():
            if "=" in a:
                name, _, val = a.partition("=")
                flags.append((name, val))
            elif a in _EXPORT_BOOL:
                flags.append((a, None))
            elif a in _EXPORT_MULTI:
                vals = []
                while k + 1 < len(args) and not args[k + 1].startswith("-"):
                    k += 1
                    vals.append(args[k])
                flags.append((a, " ".join(vals)))
            elif k + 1 < len(args):
                k += 1
                flags.append((a, args[k]))
            else:
                flags.append((a, None))
        else:
            positional.append(a)
        k += 1
    get = {("--model" if n == "-m" else n): v for n, v in flags}
    out = [f"removed `{command}`: TorchNeuron compiles the model on first use, there is no export step."]
    model, task = get.get("--model"), get.get("--task")
    where = f" wherever {positional[-1]} was loaded" if positional else ""
    if model:
        out.append(f"  model: load {model} with from_pretrained(){where}" + (f" (task {task})" if task else ""))
    shapes = [(n, v) for n, v in flags if n in _SHAPE_FLAGS]
    if shapes:
        text = " ".join(f"{n} {v}" for n, v in shapes)
        seq = get.get("--sequence_length")
        pad = f' (tokenizer padding="max_length", max_length={seq})' if seq else ""
        gen = (f'; generation: cache_implementation="static", max_cache_len={seq}'
               if seq and task in (None, "text-generation", "text-generation-with-past") else "")
        out.append(f"  {text}: static shapes -> keep inputs at these shapes{pad}{gen}")
    tp = next(((n, v) for n, v in flags if n in _TP_FLAGS), None)
    if tp:
        n, v = tp
        if v == "1":
            out.append(f'  {n} 1: one NeuronCore -> from_pretrained(..., device_map="neuron")')
        else:
            out.append(f"  {n} {v}: TP_SIZE={v} -> from_pretrained(..., distributed_config=DistributedConfig("
                       f"tp_size={v})), launched with torchrun --nproc_per_node={v}")
    dtypes = [(n, v) for n, v in flags if n in _DTYPE_FLAGS]
    if dtypes:
        text = " ".join(f"{n} {v}" for n, v in dtypes)
        target = next((_DTYPES[v] for n, v in dtypes if n != "--auto_cast" and v in _DTYPES), None)
        out.append(f"  {text}: " + (f"from_pretrained(..., dtype={target})" if target else "the dtype= of from_pretrained"))
    load = [(n, v) for n, v in flags if n in _LOAD_FLAGS]
    if load:
        text = " ".join(n if v is None else f"{n} {v}" for n, v in load)
        kw = ", ".join(_LOAD_FLAGS[n] + ("" if v is None else v) for n, v in load)
        out.append(f"  {text}: from_pretrained(..., {kw})")
    pipe = [(n, v) for n, v in flags if n in _PIPE_FLAGS]
    if pipe:
        out.append("  " + " ".join(f"{n} {v}" for n, v in pipe) + ": load them in the diffusers pipeline code")
    known = {"--model", "--task", *_SHAPE_FLAGS, *_TP_FLAGS, *_DTYPE_FLAGS, *_LOAD_FLAGS, *_PIPE_FLAGS}
    dropped = [n if v is None else f"{n} {v}" for n, v in flags if n not in known and n != "-m"]
    if dropped:
        out.append("  no equivalent, dropped: " + " ".join(dropped))
    return [_one_line(x) for x in out[:1]] + ["  " + _one_line(x) for x in out[1:]]


class OptimumCliCommands(ShellRule):
    id = "NM510"
    title = "optimum-cli export neuron / neuron cache commands removed, neuron consolidate flagged"
    fix = "mixed"
    triggers = ("optimum-cli", "optimum.exporters.neuron")
    why = """
        TorchNeuron has no ahead-of-time export: a model loaded with `device_map="neuron"` (or under
        torchrun with a DistributedConfig) compiles on first use and caches the compiled graphs
        itself. `optimum-cli export neuron` commands are removed; a comment above says where each
        flag now lives (static shapes -> input padding and the static cache's `max_cache_len`,
        `--tensor_parallel_size`/`--num_cores` -> `DistributedConfig(tp_size=...)` under torchrun,
        `--auto_cast_type`/`--torch_dtype` -> `dtype=`). `optimum-cli neuron cache ...` (the Hub
        compile cache) is dropped. `optimum-cli neuron consolidate` and `neuron serve` need
        optimum-neuron and are flagged.
    """
    before = """
        optimum-cli export neuron --model Qwen/Qwen2.5-0.5B-Instruct --batch_size 1 --sequence_length 512 --num_cores 2 --auto_cast_type bf16 compiled_model/
    """
    after = """
        # neuron-migrate NM510: removed `optimum-cli export neuron`: TorchNeuron compiles the model on first use, there is no export step.
        #   model: load Qwen/Qwen2.5-0.5B-Instruct with from_pretrained() wherever compiled_model/ was loaded
        #   --batch_size 1 --sequence_length 512: static shapes -> keep inputs at these shapes (tokenizer padding="max_length", max_length=512); generation: cache_implementation="static", max_cache_len=512
        #   --num_cores 2: TP_SIZE=2 -> from_pretrained(..., distributed_config=DistributedConfig(tp_size=2)), launched with torchrun --nproc_per_node=2
        #   --auto_cast_type bf16: from_pretrained(..., dtype=torch.bfloat16)
    """
    caveats = """
        Scripts that later load the export directory must load the original model instead; the
        Python rules migrate the loading code, this rule only says where the flags went. A command
        inside `$(...)`, backticks or a heredoc is not touched. In a pipeline, next to `||`, or as
        the only command of an `if`/loop body, the command becomes `:` instead of disappearing.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            if any(re.search(r"optimum-cli\s+(export\s+neuronx?|neuron)\b|optimum\.exporters\.neuron", u.text(t))
                   for t in embedded_scripts(u, s)):
                plan.marker(ctx, s.group, "this command string runs optimum-cli's Neuron export or tools: remove "
                            "them (TorchNeuron compiles on first use, see `neuron-migrate explain NM510`)")
            name = command_name(u, s)
            vals = [u.value(i) for i in s.words]
            if name == "optimum-cli" and len(vals) >= 3 and vals[1] == "export" and vals[2] in ("neuron", "neuronx"):
                args, label = s.words[3:], f"optimum-cli export {vals[2]}"
            elif (name and _PYTHON_RE.match(name) and len(vals) >= 3 and vals[1] == "-m"
                  and vals[2] == "optimum.exporters.neuron"):
                args, label = s.words[3:], "python -m optimum.exporters.neuron"
            elif name == "optimum-cli" and len(vals) >= 3 and vals[1] == "neuron" and vals[2] == "cache":
                if plan.editable(self.id, s) and not s.heredoc:
                    plan.remove(self.id, s)
                    self.finding(ctx, plan, s.words[0], "removed `optimum-cli neuron cache`: the Hugging Face Hub "
                                 "compile cache of optimum-neuron does not exist with TorchNeuron, which caches "
                                 "compiled graphs locally")
                continue
            elif name == "optimum-cli" and len(vals) >= 3 and vals[1] == "neuron" and vals[2] == "consolidate":
                plan.marker(ctx, s.group, "`optimum-cli neuron consolidate` needs optimum-neuron: checkpoints "
                            "saved with a DistributedConfig are consolidated with transformers.distributed."
                            "consolidate_distributed_checkpoint(checkpoint_dir, output_dir); older NxD "
                            "checkpoints still need the old tool")
                continue
            elif name == "optimum-cli" and len(vals) >= 3 and vals[1] == "neuron" and vals[2] == "serve":
                plan.marker(ctx, s.group, "`optimum-cli neuron serve` needs optimum-neuron: serve the model "
                            "with vLLM on Neuron instead")
                continue
            else:
                continue
            if not plan.editable(self.id, s) or s.heredoc:
                plan.marker(ctx, s.group, f"remove this `{label}` command: TorchNeuron compiles on first use, "
                            "there is no export step")
                continue
            raw = [u.text(i) for i in args]
            plan.remove(self.id, s)
            comments = export_comments([" ".join(r.split()) for r in raw], label)
            plan.add_comment(s.group, comment_line(self.id, comments[0]))
            for extra in comments[1:]:
                plan.add_comment(s.group, "# " + extra)
            self.finding(ctx, plan, s.words[0], f"removed `{label}` (TorchNeuron compiles on first use); the "
                         "comment above says where its flags now live")


# ------------------------------------------------------------------------------------------------
# NM511: neuron_parallel_compile


class NeuronParallelCompile(ShellRule):
    id = "NM511"
    title = "neuron_parallel_compile prefix removed"
    fix = "mixed"
    triggers = ("neuron_parallel_compile",)
    why = """
        `neuron_parallel_compile <cmd>` ran `<cmd>` once in a graph-extraction mode to fill the
        Neuron compile cache of the XLA stack. TorchNeuron compiles with `torch.compile` on first
        use; the wrapper does not exist any more. The prefix is removed and the command runs as is.
        When the script runs the very same command again afterwards (the usual "pre-compile, then
        train" pair), the pre-run is removed instead, so that training does not run twice.
    """
    before = """
        neuron_parallel_compile torchrun --nproc_per_node=32 train.py --max_steps 10
    """
    after = """
        torchrun --nproc_per_node=32 train.py --max_steps 10
    """
    caveats = """
        A pre-run that differs from the real run (fewer steps, say) is kept and now really runs:
        delete it if it was only there to compile. `neuron_parallel_compile --command ...` (collect,
        compile, clean, analyze) is flagged. Scripts that test `NEURON_EXTRACT_GRAPHS_ONLY` are
        flagged by NM514.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            if any("neuron_parallel_compile" in u.text(t) for t in embedded_scripts(u, s)):
                plan.marker(ctx, s.group, "this command string runs neuron_parallel_compile: remove the prefix "
                            "and keep the command it wraps (TorchNeuron compiles on first use)")
            k = _npc_position(u, s)
            if k is None:
                continue
            npc = s.words[k]
            wrapped = s.words[k + 1:]
            if not wrapped or u.text(wrapped[0]).startswith("-"):
                plan.marker(ctx, s.group, "neuron_parallel_compile has no TorchNeuron equivalent (graphs "
                            "compile on first use): delete this command")
                continue
            if not plan.editable(self.id, s):
                plan.marker(ctx, s.group, "remove the neuron_parallel_compile prefix (TorchNeuron compiles "
                            "on first use)")
                continue
            key = tuple(u.text(i) for i in s.words if i != npc)
            twin = next((t for t in u.by_words.get(key, ()) if t is not s), None)
            if twin is not None and not s.heredoc:
                where = "later" if twin.first > s.first else "earlier"
                plan.remove(self.id, s)
                plan.add_comment(s.group, comment_line(
                    self.id, f"removed the neuron_parallel_compile pre-run of the `{u.text(wrapped[0])}` "
                    f"command that runs {where} in this script (TorchNeuron compiles on first use)."))
                self.finding(ctx, plan, npc, "removed the neuron_parallel_compile pre-run: the same "
                             f"command runs {where} in this script and compiles on first use")
                continue
            plan.delete(self.id, npc)
            self.finding(ctx, plan, npc, "removed the neuron_parallel_compile prefix: the command now "
                         "runs for real (TorchNeuron compiles on first use); delete it if it was only a "
                         "pre-compilation run")
            scripts = {u.text(i) for i in wrapped if u.text(i).endswith((".py", ".sh"))}
            if scripts and any(
                t is not s and t.words and u.text(t.words[0]) == u.text(wrapped[0])
                and scripts <= {u.text(i) for i in t.words}
                for t in u.simples_by_command.get(u.text(wrapped[0]), ())
            ):
                plan.marker(ctx, s.group, "this was the neuron_parallel_compile pre-run of a command that runs "
                            "again in this script: it now really runs; delete it unless that is wanted")


#: commands that run their first operand as a program (`srun neuron_parallel_compile torchrun ...`)
_LAUNCHERS = frozenset({"srun", "mpirun", "mpiexec", "nohup", "exec", "sudo"})


def _npc_position(unit: ShellUnit, s: Simple) -> int | None:
    """Index in s.words of a `neuron_parallel_compile` that runs the words after it."""
    for k, i in enumerate(s.words):
        v = unit.value(i)
        if v is not None and v.rsplit("/", 1)[-1] == "neuron_parallel_compile":
            if k == 0 or command_name(unit, s) in _LAUNCHERS:
                return k
            return None
    return None


# ------------------------------------------------------------------------------------------------
# NM512: XLA-only environment variables


class XlaOnlyEnvironment(ShellRule):
    id = "NM512"
    title = "XLA-only and optimum-neuron environment variables removed"
    fix = "mixed"
    triggers = tuple(sorted(XLA_ONLY_VARS)) + XLA_ONLY_PREFIXES
    why = """
        `XLA_USE_BF16`, `XLA_DOWNCAST_BF16`, `NEURON_FUSE_SOFTMAX`,
        `NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS`, `XLA_IR_DEBUG`, `XLA_HLO_DEBUG`, `PJRT_DEVICE`,
        `NEURON_NUM_RECENT_MODELS_TO_KEEP` (and other torch-xla settings) are read only by the XLA
        stack, and `OPTIMUM_NEURON_*`-style variables only by optimum-neuron. TorchNeuron ignores
        them; bf16 comes from `dtype=torch.bfloat16` or `bf16=True`. They are removed from
        `export X=...`, `X=... cmd` prefixes, `env X=... cmd` and `unset X`, from the environment
        that launchers pass on (`mpirun -x X=...`, `srun --export=ALL,X=...`, `#SBATCH
        --export=...`), and from the scripts of `bash -c '...'`/`sh -c`/`eval '...'` when the
        string is a literal (re-lexed and re-quoted as it was). Runtime and EFA variables
        (`NEURON_RT_*` other than the one above, `FI_*`, `CCOM_*`) are kept.
    """
    before = """
        export XLA_USE_BF16=1 NEURON_RT_NUM_CORES=2
        XLA_DOWNCAST_BF16=1 torchrun --nproc_per_node=2 train.py
    """
    after = """
        export NEURON_RT_NUM_CORES=2
        torchrun --nproc_per_node=2 train.py
    """
    caveats = """
        Forms inside `$(...)` and heredocs, and `declare -x`, are not edited. A command string
        with expansions, escapes or nested quotes (`bash -c "X=1 python $S"`), a quoted or
        expanded `--export` list, and one that would be left empty (`--export=XLA_USE_BF16=1`
        exports that variable alone) get a marker instead. A line that still reads a removed
        variable (`$XLA_USE_BF16`) gets a marker.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        removed: dict[str, list[Simple]] = {}
        for s in u.simples:
            for a in assignments(u, s):
                reason = xla_only_reason(a.name)
                if reason is None or not plan.editable(self.id, s):
                    continue
                plan.delete(self.id, a.tok)
                removed.setdefault(a.name, []).append(s)
                what = {"unset": f"`unset {a.name}`"}.get(a.form, a.name)
                self.finding(ctx, plan, a.tok, f"removed {what}: {reason}")
            name = command_name(u, s)
            if name in ("mpirun", "mpiexec", "orterun"):
                self._mpirun(plan, ctx, s, removed)
            elif name in ("srun", "sbatch", "salloc"):
                self._srun(plan, ctx, s, removed)
            for tok in embedded_scripts(u, s):
                self._embedded(plan, ctx, s, tok)
        self._sbatch_lines(plan, ctx)
        if not removed:
            return
        for s in u.simples:
            if plan.is_removed(s):
                continue
            for name, where in removed.items():
                if s in where:
                    continue
                if any(references(u.text(i), name) for i in range(s.first, s.last + 1)):
                    plan.marker(ctx, s.group, f"{name} is no longer set (XLA-only, removed by neuron-migrate): "
                                "update this use")
                    break

    def _mpirun(self, plan: ShellPlan, ctx, s: Simple, removed: dict[str, list[Simple]]) -> None:
        """`mpirun -x XLA_USE_BF16=1 -x FI_PROVIDER python t.py`: the `-x` pairs of XLA-only variables go."""
        u = plan.unit
        words = s.words
        k = 1
        while k + 1 < len(words):
            flag = u.value(words[k])
            if flag is None or not flag.startswith("-"):
                if flag is None or "/" in flag or flag.endswith((".py", ".sh")) or _PYTHON_RE.match(flag) or flag in (
                        "torchrun", "bash", "sh", "env", "neuron_parallel_compile"):
                    return  # the program: what follows are its own arguments
                k += 1
                continue
            if flag == "-x":
                operand = u.value(words[k + 1])
                var = (operand or "").split("=", 1)[0]
                reason = xla_only_reason(var) if operand is not None and NAME_RE.match(var) else None
                if reason is not None:
                    if not plan.editable(self.id, s):
                        plan.marker(ctx, s.group, f"remove `-x {operand}` ({reason})")
                        return
                    plan.delete(self.id, words[k])
                    plan.delete(self.id, words[k + 1])
                    removed.setdefault(var, []).append(s)
                    self.finding(ctx, plan, words[k], f"removed `-x {var}` from the MPI launch: {reason}")
                k += 2
                continue
            k += 1

    def _srun(self, plan: ShellPlan, ctx, s: Simple, removed: dict[str, list[Simple]]) -> None:
        """`srun --export=ALL,XLA_USE_BF16=1 ...`: the XLA-only variables leave the list."""
        u = plan.unit
        words = s.words
        for k in range(1, len(words)):
            text = u.text(words[k])
            if text.startswith("--export="):
                tok, prefix, value = words[k], "--export=", text[len("--export="):]
            elif text == "--export" and k + 1 < len(words):
                tok, prefix, value = words[k + 1], "", u.text(words[k + 1])
            else:
                continue
            plain = word_value(value)
            new = _export_list(plain) if plain is not None else None
            if new is None:
                names = sorted({m.group(1) for m in _ASSIGN_ANY_RE.finditer(value) if xla_only_reason(m.group(1))})
                if names:
                    plan.marker(ctx, s.group, f"remove {', '.join(names)} from this --export list (XLA-only, "
                                "TorchNeuron ignores it)")
                return
            kept, gone = new
            if not gone:
                return
            reasons = "; ".join(f"{g}: {xla_only_reason(g)}" for g in gone)
            if not kept or not plan.editable(self.id, s) or plain != value:
                plan.marker(ctx, s.group, f"remove {', '.join(gone)} from this --export list ({reasons})")
                return
            plan.replace(self.id, tok, prefix + ",".join(kept))
            for g in gone:
                removed.setdefault(g, []).append(s)
            self.finding(ctx, plan, tok, f"removed {', '.join(gone)} from the --export list: {reasons}")
            return

    def _sbatch_lines(self, plan: ShellPlan, ctx) -> None:
        """`#SBATCH --export=ALL,XLA_USE_BF16=1` directive lines (comments to the shell)."""
        u = plan.unit
        comment_starts = {start for start, _end in u.comments}  # real comments: not heredoc or string text
        for li, line in enumerate(u.lines):
            m = _SBATCH_EXPORT_RE.match(line)
            if m is None or u.line_starts[li] not in comment_starts:
                continue
            new = _export_list(m.group(2))
            if new is None or not new[1]:
                continue
            kept, gone = new
            reasons = "; ".join(f"{g}: {xla_only_reason(g)}" for g in gone)
            inside = any(a <= li <= b for a, b in u.groups)
            if "neuron-migrate" in line and is_silenced(ignored_rules(line), self.id):
                continue
            if not kept or inside or ctx.is_edited(li):
                ctx.marker(li, f"remove {', '.join(gone)} from this --export list ({reasons})")
                continue
            ctx.replace_lines(li, li + 1, [line[: m.start(2)] + ",".join(kept) + line[m.end(2):]],
                              f"removed {', '.join(gone)} from the #SBATCH --export list: {reasons}")

    def _embedded(self, plan: ShellPlan, ctx, s: Simple, tok: int) -> None:
        """`bash -c '...'` / `eval '...'`: a literal script is rewritten, anything else is flagged."""
        u = plan.unit
        text = u.text(tok)
        names = sorted({m.group(1) for m in _ASSIGN_ANY_RE.finditer(text) if xla_only_reason(m.group(1))})
        if not names:
            return
        found: list[str] = []

        def edit(sub: ShellPlan) -> bool:
            for inner in sub.unit.simples:
                for a in assignments(sub.unit, inner):
                    if xla_only_reason(a.name) is not None and sub.editable(self.id, inner):
                        sub.delete(self.id, a.tok)
                        found.append(a.name)
            return bool(found)

        lit = literal_script(text)
        new = rewrite_script(lit[1], edit) if lit is not None else None
        if new is None or not plan.editable(self.id, s) or set(found) != set(names):
            plan.marker(ctx, s.group, f"{', '.join(names)} set inside this command string: remove "
                        f"{'it' if len(names) == 1 else 'them'} (XLA-only, TorchNeuron ignores "
                        f"{'it' if len(names) == 1 else 'them'})")
            return
        if not new.strip() and s.words.index(tok) == len(s.words) - 1 and command_name(u, s) in _SHELLS | {"eval"}:
            plan.remove(self.id, s)  # `eval 'export XLA_USE_BF16=1'`: nothing left to run
        else:
            plan.replace(self.id, tok, lit[0] + new + lit[0])
        self.finding(ctx, plan, tok, f"removed {', '.join(names)} from the command string: "
                     + "; ".join(dict.fromkeys(str(xla_only_reason(n)) for n in names)))


_SBATCH_EXPORT_RE = re.compile(r"^(#SBATCH\s+--export[= ])(\S+)(\s.*)?$")
_ASSIGN_ANY_RE = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=")
_EXPORT_ITEM_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(=[^,]*)?\Z")


def _export_list(value: str) -> tuple[list[str], list[str]] | None:
    """(kept items, removed variable names) of a Slurm ``--export`` list; None if it is not a plain
    list of ``ALL``/``NONE``/``NAME``/``NAME=value`` items (a value with a comma is ambiguous)."""
    items = value.split(",")
    kept: list[str] = []
    gone: list[str] = []
    for item in items:
        if item in ("ALL", "NONE", "NIL"):
            kept.append(item)
            continue
        if not _EXPORT_ITEM_RE.match(item) or "$" in item or "'" in item or '"' in item:
            return None
        name = item.split("=", 1)[0]
        if xla_only_reason(name) is not None:
            gone.append(name)
        else:
            kept.append(item)
    return kept, gone


# ------------------------------------------------------------------------------------------------
# NM513: NEURON_CC_FLAGS


def _flag_name(flag: str) -> str:
    return flag.split("=", 1)[0]


def split_cc_flags(content: str) -> tuple[list[str], list[str]] | None:
    """(kept, dropped) flags of a NEURON_CC_FLAGS value; None if it is not plain words."""
    if any(c in content for c in "\"'\\`") or "$(" in content:
        return None
    words = content.split()
    kept: list[str] = []
    dropped: list[str] = []
    k = 0
    while k < len(words):
        w = words[k]
        name = _flag_name(w)
        if name in CC_DROP_FLAGS:
            if "=" not in w and CC_DROP_FLAGS[name] and k + 1 < len(words) and not words[k + 1].startswith(("-", "$")):
                dropped.append(f"{w} {words[k + 1]}")
                k += 2
                continue
            dropped.append(w)
        else:
            kept.append(w)
        k += 1
    return kept, dropped


def _self_ref(word: str) -> bool:
    return word in ("$NEURON_CC_FLAGS", "${NEURON_CC_FLAGS}")


def cc_flags_plan(raw: str) -> tuple[str, str | None, str | None] | None:
    """What to do with `NEURON_CC_FLAGS=<raw>`.

    Returns (action, new raw value or None, marker message or None) with action "remove",
    "rewrite" or "mark"; None when there is nothing XLA-era in it."""
    quote = raw[:1] if raw[:1] in "\"'" else ""
    if quote and len(raw) >= 2 and raw.endswith(quote) and quote not in raw[1:-1]:
        content = raw[1:-1]
    elif not quote and re.fullmatch(r"[A-Za-z0-9_=./:,+@%{}$-]*", raw):
        content = raw
    else:
        content = None
    checks = [f for f in CC_CHECK_FLAGS if re.search(re.escape(f) + r"(?![A-Za-z0-9_-])", raw)]
    drops = [f for f in CC_DROP_FLAGS if re.search(re.escape(f) + r"(?![A-Za-z0-9_-])", raw)]
    if not checks and not drops:
        return None
    split = split_cc_flags(content) if content is not None else None
    if split is None:
        return ("mark", None, f"NEURON_CC_FLAGS holds XLA-era compiler flags ({', '.join(drops + checks)}): "
                "remove them; check whether TorchNeuron still needs any of the others")
    kept, dropped = split
    meaningful = [w for w in kept if not _self_ref(w)]
    if dropped and not meaningful:
        return ("remove", None, None)
    message = cc_check_message(meaningful)
    if not dropped:
        return ("mark", None, message)
    new_content = " ".join(kept)
    q = quote or ('"' if " " in new_content else "")
    return ("rewrite", f"{q}{new_content}{q}", message)


def cc_check_message(flags: list[str]) -> str:
    # the same text before and after the XLA-era flags are removed, so that a second run agrees
    return (f"NEURON_CC_FLAGS was written for the XLA stack: check whether TorchNeuron's compiler still "
            f"needs {' '.join(flags)}, remove them otherwise")


class NeuronCcFlags(ShellRule):
    id = "NM513"
    title = "NEURON_CC_FLAGS stripped of XLA-era compiler flags"
    fix = "mixed"
    triggers = ("NEURON_CC_FLAGS",)
    why = """
        `NEURON_CC_FLAGS` passed neuronx-cc options to the XLA stack's compiler. `--model-type`,
        `--distribution-strategy`, `--cache_dir` and `--retry_failed_compilation` belonged to that
        pipeline (optimum-neuron and neuron_parallel_compile set them) and are removed; an
        assignment left empty is removed. Flags that change numerics (`--auto-cast`,
        `--auto-cast-type`, `--enable-saturate-infinity`, `--enable-mixed-precision-accumulation`)
        and any other flag are kept and flagged: whether TorchNeuron's `torch.compile` path honours
        them is not established.
    """
    before = """
        export NEURON_CC_FLAGS="--model-type transformer --distribution-strategy=llm-training"
        export NEURON_CC_FLAGS="--model-type=transformer -O1"
    """
    after = """
        # TODO(neuron-migrate NM513): NEURON_CC_FLAGS was written for the XLA stack: check whether TorchNeuron's compiler still needs -O1, remove them otherwise
        export NEURON_CC_FLAGS="-O1"
    """
    kinds = ("shell", "dockerfile")
    caveats = """
        Values built with quotes inside, escapes or `$(...)` are only flagged. Also applies to
        `ENV NEURON_CC_FLAGS=...` in Dockerfiles.
    """

    def apply(self, ctx) -> None:
        if ctx.kind == "dockerfile":
            from codemods.dockerfile import dockerfile_cc_flags

            dockerfile_cc_flags(self.id, ctx)
            return
        super().apply(ctx)

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            for a in assignments(u, s):
                if a.name != "NEURON_CC_FLAGS" or a.value is None:
                    continue
                start = u.toks[a.tok].start
                edit_cc_flags(
                    ctx, u.text(a.tok), a.value, plan.editable(self.id, s), u.line_of(start), u.col_of(start) + 1,
                    delete=lambda tok=a.tok: plan.delete(self.id, tok),
                    replace=lambda text, tok=a.tok: plan.replace(self.id, tok, text),
                    mark=lambda message, g=s.group: plan.marker(ctx, g, message),
                )


def edit_cc_flags(
    ctx,
    word: str,
    value: str,
    editable: bool,
    line: int,
    column: int,
    delete: Callable[[], None],
    replace: Callable[[str], None],
    mark: Callable[[str], None],
) -> None:
    """NM513 on one `NEURON_CC_FLAGS=<value>` word (a shell assignment or a Dockerfile ENV pair)."""
    decided = cc_flags_plan(value)
    if decided is None:
        return
    action, new, message = decided
    if action != "mark" and not editable:
        action, message = "mark", "NEURON_CC_FLAGS holds XLA-era compiler flags: remove them"
    if action == "remove":
        delete()
        ctx.finding(line, "removed NEURON_CC_FLAGS: it only held XLA-era compiler flags", "applied", column)
    elif action == "rewrite":
        replace(word[: len(word) - len(value)] + str(new))
        gone = split_cc_flags(value.strip("\"'"))
        ctx.finding(line, "removed XLA-era flags from NEURON_CC_FLAGS: " + " ".join(gone[1] if gone else ()),
                    "applied", column)
    if message:
        mark(message)


# ------------------------------------------------------------------------------------------------
# NM514: NEURON_EXTRACT_GRAPHS_ONLY


class ExtractGraphsOnly(ShellRule):
    id = "NM514"
    title = "NEURON_EXTRACT_GRAPHS_ONLY branches flagged"
    fix = "manual"
    triggers = ("NEURON_EXTRACT_GRAPHS_ONLY",)
    why = """
        neuron_parallel_compile set `NEURON_EXTRACT_GRAPHS_ONLY=1` during its graph-extraction
        run, and scripts tested it to shorten that run (`MAX_STEPS=10`). Without
        neuron_parallel_compile nothing sets it: only the branch of the real run is ever taken.
        Each test (or setting) of it is flagged so that a person keeps the right branch.
    """
    before = """
        if [ "$NEURON_EXTRACT_GRAPHS_ONLY" = "1" ]; then MAX_STEPS=10; else MAX_STEPS=-1; fi
    """
    after = """
        # TODO(neuron-migrate NM514): NEURON_EXTRACT_GRAPHS_ONLY is never set without neuron_parallel_compile: keep only the real-run branch and drop this test (or setting)
        if [ "$NEURON_EXTRACT_GRAPHS_ONLY" = "1" ]; then MAX_STEPS=10; else MAX_STEPS=-1; fi
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        seen: set[int] = set()
        for i, tok in enumerate(u.toks):
            if tok.kind not in ("word", "arith") or "NEURON_EXTRACT_GRAPHS_ONLY" not in tok.text:
                continue
            g = u.group_of_tok[i]
            if g < 0 or g in seen:
                continue
            seen.add(g)
            plan.marker(ctx, g, "NEURON_EXTRACT_GRAPHS_ONLY is never set without neuron_parallel_compile: keep "
                        "only the real-run branch and drop this test (or setting)")


RULES = (OptimumCliCommands, NeuronParallelCompile, XlaOnlyEnvironment, NeuronCcFlags, ExtractGraphsOnly)
