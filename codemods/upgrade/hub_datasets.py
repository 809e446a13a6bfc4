"""Calls of huggingface_hub (0.x -> the installed 2.x) and datasets (2.x -> the installed 5.x) whose
keywords or functions the targets removed (NM617), read from the generated upgrade data
(``functions``: the keywords each function lost, with the last release that had them):

* ``use_auth_token=`` -> ``token=`` on huggingface_hub functions and ``HfApi`` methods (the 0.x
  ``@validate_hf_hub_args`` turned one into the other; 1.0 removed it) and on ``datasets.load_dataset``
  / ``load_dataset_builder`` (removed in datasets 3.0);
* ``load_dataset(ignore_verifications=True)`` -> ``verification_mode="no_checks"`` (3.0);
* ``load_dataset(trust_remote_code=...)`` dropped: datasets 4.0 runs no loading script (a marker
  says what a dataset that had one needs); ``task=`` dropped with a marker (task templates, 3.0);
* ``datasets.set_caching_enabled(True|False)`` -> ``enable_caching()`` / ``disable_caching()``;
* the other keywords huggingface_hub 1.0 removed: dropped (``resume_download=``,
  ``local_dir_use_symlinks=`` did nothing any more), with a marker naming the replacement where
  they did something (``proxies=``: the proxy environment variables).

Removed names (``HfFolder``, ``Repository``, ``cached_download``, ``load_metric`` ...) are NM608's,
except ``set_caching_enabled`` (this rule's: NM608 leaves it alone).
"""

from __future__ import annotations

import libcst as cst

from codemods.common.arg_plan import NOT_LITERAL, ArgPlan, keywords, literal, rewrite_call
from codemods.common.statements import assigned_values
from codemods.upgrade.base import owned_elsewhere, rename_keyword
from codemods.upgrade.data import data
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule
from migrator.scopes import named_params

LIBS = ("huggingface_hub", "datasets")
HF_API = "huggingface_hub.HfApi"
LOADERS = ("datasets.load_dataset", "datasets.load_dataset_builder")
SCRIPT_MARKER = "Load this dataset's data files if it has a loading script: datasets 4.0 runs none."
HUB_MARKERS = (
    (SCRIPT_MARKER,
     """trust_remote_code= was dropped: datasets 4.0 runs no dataset loading script (the keyword does nothing
     now), so a dataset that still has one no longer loads; load its data files instead (on the Hub, its
     Parquet conversion: revision="refs/convert/parquet")."""),
)


#: removed huggingface_hub keywords that did nothing in the last 0.x releases (dropped silently)
HUB_NOOPS = {
    "resume_download": "downloads always resume since 0.23",
    "local_dir_use_symlinks": "a local_dir download is plain files since 0.23",
    "legacy_cache_layout": "the legacy cache layout is gone",
    "new_session": "login(token=...) always saves the token",
    "write_permission": "login no longer checks the token's role",
}
#: what replaces the other removed huggingface_hub keywords
#: keyword -> (what to do, for the marker; why, for its detail)
HUB_HINTS = {
    "proxies": ("set HTTP_PROXY / HTTPS_PROXY in the environment", "per-request proxies are ignored since huggingface_hub 1.0"),
    "force_filename": ("download with local_dir= and rename the file", "the keyword is gone"),
    "multi_commits": ("split a very large folder into several upload_folder calls", "upload_folder makes one commit"),
    "multi_commits_verbose": ("split a very large folder into several upload_folder calls",
                              "upload_folder makes one commit"),
    "space_storage": ("request storage for the Space in its settings", "the keyword is gone"),
}


def _target(ctx: PythonContext, func: cst.BaseExpression) -> str | None:
    """The huggingface_hub / datasets function a call calls: through the imports, and
    ``HfApi(...).method`` / ``HfApi.method``."""
    qual = ctx.qualname(func)
    if qual is None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
        owner = ctx.qualname(func.value.func)
        if owner == HF_API:
            qual = f"{HF_API}.{func.attr.value}"
    elif qual is None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
        # `api = HfApi()` then `api.upload_folder(...)`: a name that every assignment here gives an HfApi
        scope = ctx.scope
        params = {p.name.value for p in named_params(scope)} if isinstance(scope, cst.FunctionDef) else set()
        values = [] if func.value.value in params else assigned_values(ctx, func.value.value)
        if values and all(isinstance(v, cst.Call) and ctx.qualname(v.func) == HF_API for v in values):
            qual = f"{HF_API}.{func.attr.value}"
    if qual is None or qual.split(".", 1)[0] not in LIBS:
        return None
    # `from huggingface_hub import hf_hub_download` resolves to the public name: the data's key
    return qual


def _takes_token(qual: str) -> bool:
    """The target function has a ``token`` parameter (the data's target signature), or it is a
    huggingface_hub function / HfApi method (every one of them takes ``token=`` since 0.14)."""
    entry = data().function_change(qual)
    if entry is not None:
        return "token" in {p[0] for p in entry["new"]}
    return qual.startswith("huggingface_hub.")


class HubDatasetsCalls(PythonRule):
    id = "NM617"
    markers = HUB_MARKERS
    title = "huggingface_hub / datasets calls: use_auth_token= -> token=, load_dataset keywords datasets 3-4 removed, set_caching_enabled"
    fix = "mixed"
    triggers = ("use_auth_token", "ignore_verifications", "trust_remote_code", "set_caching_enabled", "task=",
                "resume_download", "local_dir_use_symlinks", "proxies=", "force_filename", "multi_commits",
                "legacy_cache_layout", "new_session", "write_permission", "space_storage")
    why = """
        huggingface_hub 1.0 removed the `use_auth_token=` its 0.x functions still turned into
        `token=`, and datasets 3.0 removed it from `load_dataset` (with `ignore_verifications=`,
        now `verification_mode="no_checks"`, and the task templates' `task=`); datasets 4.0
        stopped running dataset loading scripts (`trust_remote_code=` does nothing) and
        `set_caching_enabled` became `enable_caching()` / `disable_caching()`. The generated
        upgrade data lists the keywords each function lost; the migrated training scripts would
        fail on them (`TypeError: ... unexpected keyword argument`).
    """
    before = """
        from datasets import load_dataset, set_caching_enabled
        from huggingface_hub import snapshot_download

        set_caching_enabled(False)
        path = snapshot_download("org/model", use_auth_token=token)
        ds = load_dataset("org/data", use_auth_token=token, ignore_verifications=True, trust_remote_code=False)
    """
    after = """
        from datasets import disable_caching, load_dataset
        from huggingface_hub import snapshot_download

        disable_caching()
        path = snapshot_download("org/model", token=token)
        ds = load_dataset("org/data", token=token, verification_mode="no_checks")
    """
    caveats = """
        Calls are recognised through the module's imports (and `HfApi().method(...)`, or a method of
        a name that every assignment of its function, or of the module, gives `HfApi()`); a method
        called on a `Dataset` held in a variable, or on an `HfApi` passed in, is not followed. A
        `trust_remote_code=` that is not literally False leaves a marker: whether the dataset
        had a loading script is only known on the Hub. `ignore_verifications=` with a
        non-literal value and `task=` get markers. `HfFolder`, `Repository`,
        `cached_download`, `load_metric` and the other removed names are NM608's.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = _target(ctx, node.func)
        if qual is None or owned_elsewhere(ctx, node.func, self.id):
            return
        if qual == "datasets.set_caching_enabled":
            self._caching(node, ctx)
            return
        kw = keywords(node)
        if not kw:
            return
        entry = data().function_change(qual)
        removed = set(entry["removed"]) if entry else set()
        plan = ArgPlan()
        if "use_auth_token" in kw and ("use_auth_token" in removed or (entry is None and _takes_token(qual))):
            if "token" not in kw:
                rename_keyword(ctx, kw["use_auth_token"], "token")
                ctx.finding(kw["use_auth_token"], "use_auth_token= -> token= (removed in "
                            f"{'huggingface_hub 1.0' if qual.startswith('huggingface_hub') else 'datasets 3.0'})")
            else:
                plan.drop.add("use_auth_token")
                ctx.marker(node, "both use_auth_token= and token= were passed: use_auth_token= was dropped")
        if qual in LOADERS:
            self._loader(node, ctx, kw, removed, plan)
        elif qual.startswith("huggingface_hub."):
            hinted: dict[tuple[str, str], list[str]] = {}  # (keywords of one hint: one marker, `multi_commits=, ...`)
            for name in sorted(set(kw) & removed - {"use_auth_token"}):
                plan.drop.add(name)
                if name in HUB_NOOPS:
                    ctx.finding(kw[name], f"{name}= dropped (gone in huggingface_hub 1.0: {HUB_NOOPS[name]})")
                else:
                    hinted.setdefault(HUB_HINTS.get(name, ("drop what relied on it", "nothing replaces it")), []).append(name)
            for hint, names in hinted.items():
                last = ", ".join(dict.fromkeys(entry["removed"][n] for n in names)) if entry else ""
                shown = "=, ".join(names)
                advice = f"{hint[0][:1].upper()}{hint[0][1:]}"
                ctx.marker(node, fitted(f"{advice}: {shown}= {'is' if len(names) == 1 else 'are'} gone in huggingface_hub 1.0.",
                                        f"{advice}: {names[0]}= and the like are gone in huggingface_hub 1.0."),
                           detail=f"{shown}= {'was' if len(names) == 1 else 'were'} dropped: huggingface_hub 1.0 removed "
                                  f"{'it' if len(names) == 1 else 'them'} (last in {last}): {hint[1]}")
        rewrite_call(ctx, node, plan)

    def _loader(self, node: cst.Call, ctx: PythonContext, kw: dict, removed: set, plan: ArgPlan) -> None:
        if "ignore_verifications" in kw and "ignore_verifications" in removed:
            value = literal(kw["ignore_verifications"].value)
            if value is True and "verification_mode" not in kw:
                plan.drop.add("ignore_verifications")
                plan.add.append(("verification_mode", lambda: cst.SimpleString('"no_checks"')))
                ctx.finding(kw["ignore_verifications"], 'ignore_verifications=True -> verification_mode="no_checks" '
                            "(removed in datasets 3.0)")
            elif value is False or value is None:
                plan.drop.add("ignore_verifications")
                ctx.finding(kw["ignore_verifications"], f"ignore_verifications={value} dropped (removed in datasets "
                            "3.0; the default checks are the same)")
            else:
                ctx.marker(node, 'Pass verification_mode="no_checks" where ignore_verifications was true: datasets 3.0 '
                                 "dropped it.")
        if "trust_remote_code" in kw and "trust_remote_code" in removed:
            plan.drop.add("trust_remote_code")
            value = literal(kw["trust_remote_code"].value)
            if value is False or value is None:
                ctx.finding(kw["trust_remote_code"], f"trust_remote_code={value} dropped (datasets 4.0 runs no "
                            "loading script)")
            else:
                ctx.marker(node, SCRIPT_MARKER)
        if "task" in kw and "task" in removed:
            plan.drop.add("task")
            ctx.marker(node, "Rename and cast the columns with rename_column / cast_column: datasets 3.0 dropped task=.",
                       detail="datasets 3.0 removed the task templates that renamed and cast the columns for a task")

    def _caching(self, node: cst.Call, ctx: PythonContext) -> None:
        if data().removed_name("datasets", "set_caching_enabled") is None:
            return
        args = [a for a in node.args if a.keyword is None or a.keyword.value == "boolean"]
        value = literal(args[0].value) if len(args) == 1 and len(node.args) == 1 else NOT_LITERAL
        if value not in (True, False):
            ctx.marker(node, "Call datasets.enable_caching() or disable_caching(): set_caching_enabled is gone.")
            return
        binding = ctx.imports.binding_of(node.func)
        new = ctx.name_for("datasets.enable_caching" if value else "datasets.disable_caching", anchor=binding)
        ctx.replace(node, cst.Call(func=new, args=[]))
        ctx.finding(node, f"set_caching_enabled({value}) -> {'enable' if value else 'disable'}_caching() "
                    "(removed in datasets 3.0)")


RULES = (HubDatasetsCalls,)
