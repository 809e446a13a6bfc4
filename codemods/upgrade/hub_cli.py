"""``huggingface-cli`` (huggingface_hub 0.x) on command lines -> ``hf`` (NM620).

huggingface_hub 1.0 replaced the ``huggingface-cli`` command by ``hf``: the pinned huggingface_hub
installs ``hf`` only, so a launcher that logs in or downloads a checkpoint with ``huggingface-cli``
fails with "command not found" once the project installs the migrated stack. The commands moved
(``login`` is ``hf auth login``) and some options went. What ``hf`` accepts is read from the pinned
huggingface_hub's ``hf <command> --help`` (``HF_OPTIONS``; tests/test_upgrade_runtime.py checks the
table against the installed CLI)."""

from __future__ import annotations

import re

from codemods.project.dockerfile import DockerPlan, docker_plan, exec_form
from codemods.project.shell_plans import ShellPlan, _shell_plan, plan_for, word_value
from codemods.project.shell_syntax import ShellSyntaxError
from migrator.rules import TextRule

OLD = "huggingface-cli"
#: old command -> the words that replace ``huggingface-cli <command>``
COMMANDS = {
    "login": "hf auth login", "logout": "hf auth logout", "whoami": "hf auth whoami",
    "download": "hf download", "upload": "hf upload", "env": "hf env", "version": "hf version",
    "lfs-enable-largefiles": "hf lfs-enable-largefiles",
}
#: the options of those ``hf`` commands in the pinned huggingface_hub (2.4: ``hf <command> --help``)
HF_OPTIONS = {
    "login": ("--token", "--add-to-git-credential", "--no-add-to-git-credential", "--force", "--no-force"),
    "logout": ("--token-name",),
    "whoami": (),
    "download": ("--repo-type", "--type", "--revision", "--include", "--exclude", "--cache-dir", "--local-dir",
                 "--force-download", "--no-force-download", "--dry-run", "--token", "--max-workers", "--format"),
    "upload": ("--repo-type", "--type", "--revision", "--private", "--no-private", "--include", "--exclude",
               "--delete", "--commit-message", "--commit-description", "--create-pr", "--no-create-pr", "--every",
               "--token", "--format"),
    "env": (), "version": (), "lfs-enable-largefiles": (),
}
#: old options with no effect any more, dropped (with the value they take: True)
DROPPED = {"download": {"--local-dir-use-symlinks": True, "--resume-download": False}}

MARKER = "Replace `huggingface-cli {command}` with its `hf` command (huggingface_hub 1.x has no huggingface-cli)."


_VARIABLE = re.compile(r'"?\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?"?')


def plan_words(values: list[str | None], texts: list[str]) -> tuple[dict[int, str | None], str | None]:
    """For the words of one command starting with ``huggingface-cli`` (their values, None where known only at
    run time, and their texts): (index -> new text, None to delete) and a marker message when the command
    cannot be rewritten (then no edits). A variable is taken for one value (a repo id, a token) unless it is
    named for options (``$ARGS``, ``$FLAGS``, ``$OPTS``)."""
    command = values[1] if len(values) > 1 else None
    if command is None or command not in COMMANDS:
        return {}, MARKER.format(command=command if command and not command.startswith("-") else "...")
    edits: dict[int, str | None] = {0: COMMANDS[command], 1: None}
    allowed = HF_OPTIONS[command]
    dropped = DROPPED.get(command, {})
    k = 2
    while k < len(values):
        v = values[k]
        if v is None:
            var = _VARIABLE.fullmatch(texts[k])
            if var is None or any(w in var.group(1).upper() for w in ("ARG", "FLAG", "OPT")):
                return {}, MARKER.format(command=command)  # words known only at run time
            k += 1
            continue
        name = v.partition("=")[0]
        if name in dropped:
            edits[k] = None
            if dropped[name] and "=" not in v:
                if k + 1 >= len(values):
                    return {}, MARKER.format(command=command)
                edits[k + 1] = None
                k += 1
        elif v.startswith("-") and name not in allowed:
            return {}, MARKER.format(command=command)
        k += 1
    return edits, None


class HubCli(TextRule):
    id = "NM620"
    title = "huggingface-cli (gone in huggingface_hub 1.x) on command lines -> hf"
    fix = "mixed"
    kinds = ("shell", "dockerfile")
    triggers = (OLD,)
    markers = ((MARKER, """huggingface_hub 1.0 replaced the huggingface-cli command by hf; the rule rewrites the
                commands whose hf form it knows (login, logout, whoami -> hf auth ...; download, upload, env,
                version, lfs-enable-largefiles -> hf ...) when every option is one hf accepts; other commands
                (scan-cache -> hf cache, repo -> hf repos, ...) and options are yours to map."""),)
    why = """
        The migrated stack pins huggingface_hub 1.x, which installs the `hf` command only:
        `huggingface-cli login` / `download` in a launcher, a Dockerfile `RUN` or a notebook `!`
        line fails with "command not found". `login`, `logout` and `whoami` are `hf auth ...` now;
        `download`, `upload`, `env`, `version` and `lfs-enable-largefiles` keep their name under
        `hf`. `--local-dir-use-symlinks` and `--resume-download` of `download` had no effect since
        huggingface_hub 0.23 (files are copied into `--local-dir`, downloads resume) and go.
    """
    before = """
        huggingface-cli login --token $HF_TOKEN
        huggingface-cli download meta-llama/Llama-3.2-1B --local-dir ./llama --local-dir-use-symlinks False
    """
    after = """
        hf auth login --token $HF_TOKEN
        hf download meta-llama/Llama-3.2-1B --local-dir ./llama
    """
    caveats = """
        Only a command that starts with `huggingface-cli` (after its variable assignments) is
        rewritten; another command, an option `hf` does not accept (`--quiet`), or a word known
        only at run time (`$ARGS`) gets a marker. Exec-form Dockerfile instructions get a marker.
    """

    def apply(self, ctx) -> None:
        if ctx.kind == "dockerfile":
            plan = docker_plan(ctx)
            if plan is None:
                return
            self._docker(plan, ctx)
            for _g, body in plan.bodies():
                self._shell(body, ctx)
            plan.flush(ctx)
            return
        plan = plan_for(ctx, _shell_plan)
        if not isinstance(plan, ShellPlan):
            return
        self._shell(plan, ctx)
        plan.flush(ctx)

    def _shell(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            words = [i for i in s.words if i not in plan.deleted]
            if not words or u.value(words[0]) != OLD or not plan.editable(self.id, s):
                continue
            edits, marker = plan_words([u.value(i) for i in words], [u.text(i) for i in words])
            line = plan.offset + u.line_of(u.toks[words[0]].start)
            if marker:
                plan.marker(ctx, s.group, marker)
                continue
            for k, text in edits.items():
                if text is None:
                    plan.delete(self.id, words[k])
                else:
                    plan.replace(self.id, words[k], text)
            ctx.finding(line, f"huggingface-cli {u.value(words[1])} -> {edits[0]} (huggingface_hub 1.x has no "
                              "huggingface-cli)", "applied", u.col_of(u.toks[words[0]].start) + 1)

    def _docker(self, plan: DockerPlan, ctx) -> None:
        u = plan.unit
        for g, ins in enumerate(u.instructions):
            if ins.keyword not in ("RUN", "CMD", "ENTRYPOINT") or plan.silenced(self.id, g):
                continue
            text = u.src[ins.args_start: ins.end]
            if OLD not in text or "<<" in text:
                continue
            if exec_form(u.src, ins) is not None or ins.inner_comments:
                plan.marker(ctx, g, MARKER.format(command="..."))
                continue
            try:
                words = [w.text for w in u.words(ins)]
            except ShellSyntaxError:
                continue
            values = [word_value(w) for w in words]
            for start in [k for k, v in enumerate(values) if v == OLD and (k == 0 or words[k - 1] in _BEFORE)]:
                end = next((j for j in range(start, len(words)) if words[j] in _BEFORE), len(words))
                edits, marker = plan_words(values[start:end], words[start:end])
                if marker:
                    plan.marker(ctx, g, marker)
                    continue
                for k, new in edits.items():
                    if new is None:
                        plan.delete(self.id, (g, start + k))
                    else:
                        plan.replace(self.id, (g, start + k), new)
                ctx.finding(ins.first, f"huggingface-cli {values[start + 1]} -> {edits[0]} (huggingface_hub 1.x has "
                                       "no huggingface-cli)")


#: shell operators after which a word starts a command
_BEFORE = frozenset({"&&", "||", ";", "|"})

RULES = (HubCli,)
