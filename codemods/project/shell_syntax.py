"""A small bash lexer and parser for the shell rules (NM510-NM516, NM523) and Dockerfile lines.

It knows quotes, ``\\`` continuations, ``$(...)``/``${...}``/backticks, arrays, heredocs, comments
and the compound commands; every token keeps its byte offsets in the unit, so that the rules edit
exact spans (:mod:`codemods.project.shell_plans`). Text it does not understand raises
:class:`ShellSyntaxError` and the unit is left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

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


def parses(text: str) -> bool:
    """Whether ``text`` is shell text this module understands (lexed and parsed whole): the engine's
    output guard for shell units (``codemods.all_rules_parsers``)."""
    try:
        Parser(Lexer(text).tokens()).program()
    except (ShellSyntaxError, RecursionError, IndexError):
        return False
    return True
