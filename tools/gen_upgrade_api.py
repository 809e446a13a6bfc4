"""Generate ``codemods/upgrade/upgrade_api.json.gz``: what the old Transformers/TRL/Diffusers/
Accelerate/PEFT/huggingface_hub/datasets releases that optimum-neuron projects pinned had and the
pinned targets removed, moved, renamed or changed. The NM6xx rules read it
(``codemods.upgrade.data``).

How it works
------------
The same file is the probe: ``python tools/gen_upgrade_api.py --probe`` prints, as JSON, the facts
of whatever versions the running interpreter imports (public names per module with the canonical
``module:qualname`` of each class/function, dataclass fields with defaults and help, public
attributes of classes users call, override signatures of the methods users subclass, the
``GenerationConfig`` defaults, the ``from_pretrained`` keywords, and the libraries' own
deprecation tables: every ``deprecate_kwarg("old", new_name="new")`` in their source). The main
run probes each OLD environment (a scratch virtual environment per era, made with
``--system-site-packages`` so that torch comes from the system: every probed library is installed
in the venv itself, which the probe asserts, so no target version leaks in) and the installed
targets, and writes the difference:

* ``removed_names``: ``module -> name -> {last, moved_to}``: public in an old release (``last``:
  the newest that had it), absent from the target; ``moved_to`` is where the object lives in the
  target (same name, or the name it aliased in the old release: ``SampleDecoderOnlyOutput`` was
  ``GenerateDecoderOnlyOutput`` from 4.42 on), else absent;
* ``removed_attrs``: ``class -> attribute -> last`` (``PreTrainedTokenizerBase.encode_plus``);
* ``fields``: per dataclass: ``removed`` (``name -> {last, renamed_to?}``; ``renamed_to`` from the
  old release's own help text / deprecation table), ``defaults`` (``name -> [old, new, last]``
  where the default changed);
* ``methods``: ``Class.method -> {old: params, new: params, last}`` where the parameters changed;
* ``functions``: ``function -> {removed: {keyword: last}, new: params}`` for the functions users
  call (``datasets.load_dataset``, ``huggingface_hub.hf_hub_download``, ...) that lost keywords
  (``use_auth_token``, ``trust_remote_code``, ``ignore_verifications``);
* ``deprecations``: the ``deprecate_kwarg`` entries of the old releases (``lib, where, old, new,
  version``);
* ``target``: the target-side facts the rules rely on (versions, the tracked fields' defaults,
  the tracked methods' parameters): ``tests/test_upgrade_api.py`` re-probes the installed
  targets and compares, so a target bump that changes them fails the test. The OLD side cannot
  be regenerated offline (it needs the registry): the test checks only the target side. After the
  target API data is regenerated, ``--prune-present`` (offline) drops the removed names the target
  now has, the rule a full run applies (transformers v5's legacy ``*TokenizerFast`` names).

Running it (needs the package registry; about 10 minutes)::

    python tools/gen_upgrade_api.py --make-venvs     # create /tmp/upg/<era> venvs (once)
    python tools/gen_upgrade_api.py                  # probe every era + the targets, write the data
    python tools/gen_upgrade_api.py --check-target   # offline: the target side still holds

The eras (versions the optimum-neuron releases pinned or ran with: transformers 4.31-4.57,
accelerate 0.21-1.10, TRL, huggingface_hub 0.16-0.36 and datasets 2.14-4.0 of the same days) are in
``ERAS``; ``--make-venvs`` installs an era's pins into an existing venv too (a changed pin).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import enum
import gzip
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import typing
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "codemods", "upgrade", "upgrade_api.json.gz")
VENV_ROOT = os.environ.get("UPGRADE_VENVS", "/tmp/upg")

#: era -> pip requirements (torch comes from the system: ``pip install torch==2.13.0`` there)
ERAS = {
    "old0": ["transformers==4.31.0", "trl==0.4.7", "diffusers==0.19.3", "accelerate==0.21.0", "peft==0.4.0",
             "huggingface_hub<0.17", "tokenizers<0.14", "datasets==2.14.7"],
    "old1": ["transformers==4.36.2", "trl==0.8.6", "diffusers==0.27.2", "accelerate==0.29.2", "peft==0.10.0",
             "huggingface_hub<0.25", "tokenizers<0.19", "datasets==2.19.2"],
    # datasets pinned to a release of the era (unpinned, pip took the newest, a target-era 5.x)
    "old2": ["transformers==4.45.2", "trl==0.11.4", "diffusers==0.32.2", "accelerate==1.0.1", "peft==0.13.2",
             "huggingface_hub<0.27", "datasets==2.21.0"],
    "old3": ["transformers==4.51.3", "trl==0.19.1", "diffusers==0.33.1", "accelerate==1.7.0", "peft==0.15.2",
             "huggingface_hub<0.34", "datasets==3.6.0"],
    "old4": ["transformers==4.57.1", "trl==0.24.0", "diffusers==0.35.2", "accelerate==1.10.1", "peft==0.17.1",
             "huggingface_hub<1.0", "datasets==4.0.0"],
}
LIBS = ("transformers", "trl", "diffusers", "accelerate", "peft", "huggingface_hub", "datasets")

MODULES = (
    "transformers", "transformers.utils", "transformers.utils.import_utils", "transformers.generation",
    "transformers.generation.utils", "transformers.generation.beam_search", "transformers.trainer_utils",
    "transformers.trainer_pt_utils", "transformers.optimization", "transformers.modeling_utils",
    "transformers.pytorch_utils", "transformers.tokenization_utils_base", "transformers.integrations",
    "transformers.file_utils", "transformers.deepspeed", "transformers.training_args",
    "transformers.models.llama.modeling_llama", "transformers.models.mistral.modeling_mistral",
    "transformers.models.gpt_neox.modeling_gpt_neox", "transformers.models.t5.modeling_t5",
    "transformers.models.bert.modeling_bert", "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.qwen2_vl.modeling_qwen2_vl",
    "trl", "trl.trainer", "trl.trainer.utils", "trl.core",
    "diffusers", "diffusers.models", "diffusers.models.attention_processor", "diffusers.models.cross_attention",
    "diffusers.models.unet_2d_condition", "diffusers.models.unets.unet_2d_condition", "diffusers.models.vae",
    "diffusers.models.attention", "diffusers.utils",
    "accelerate", "accelerate.utils", "peft", "peft.utils",
    "huggingface_hub", "huggingface_hub.hf_api", "huggingface_hub.file_download", "huggingface_hub.utils",
    "datasets", "datasets.load", "datasets.utils",
)
#: dataclasses whose fields are compared
DATACLASSES = (
    "transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments", "trl.SFTConfig", "trl.DPOConfig",
    "trl.RewardConfig", "peft.LoraConfig",
)
#: classes whose public attributes (methods) are compared
CLASSES = (
    "transformers.PreTrainedTokenizerBase", "transformers.PreTrainedModel", "transformers.Trainer",
    "transformers.TrainingArguments", "transformers.GenerationMixin", "accelerate.Accelerator",
    "huggingface_hub.HfApi", "datasets.Dataset", "datasets.DatasetDict",
)
#: methods users override: their parameters are compared
METHODS = (
    "transformers.Trainer.compute_loss", "transformers.Trainer.training_step", "transformers.Trainer.prediction_step",
    "transformers.Trainer.log", "transformers.Trainer.create_optimizer", "transformers.Trainer.create_scheduler",
    "transformers.Trainer.evaluate", "transformers.Trainer.save_model", "transformers.Trainer._save",
    "transformers.Trainer.get_train_dataloader", "transformers.Trainer.create_optimizer_and_scheduler",
    "transformers.Trainer.__init__", "trl.SFTTrainer.__init__",
)
#: functions users call whose keyword parameters are compared (``functions``: removed keywords)
FUNCTIONS = (
    "datasets.load_dataset", "datasets.load_dataset_builder", "datasets.load_from_disk", "datasets.Dataset.map",
    "datasets.Dataset.filter", "datasets.Dataset.push_to_hub", "datasets.DatasetDict.push_to_hub",
    "datasets.DatasetDict.map",
    "huggingface_hub.hf_hub_download", "huggingface_hub.snapshot_download", "huggingface_hub.login",
    "huggingface_hub.create_repo", "huggingface_hub.upload_file", "huggingface_hub.upload_folder",
    "huggingface_hub.list_models", "huggingface_hub.model_info", "huggingface_hub.whoami",
    "huggingface_hub.HfApi.create_repo", "huggingface_hub.HfApi.upload_file", "huggingface_hub.HfApi.upload_folder",
    "huggingface_hub.HfApi.model_info", "huggingface_hub.HfApi.list_models", "huggingface_hub.HfApi.whoami",
    "huggingface_hub.HfApi.__init__",
)
FROM_PRETRAINED = ("transformers.PreTrainedModel.from_pretrained", "transformers.PreTrainedTokenizerBase.from_pretrained",
                   "diffusers.DiffusionPipeline.from_pretrained")


# ----------------------------------------------------------------------------------- probe side


def _resolve(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001 - a missing module: try the parent
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except Exception:  # noqa: BLE001
            return None
        return obj
    return None


def _value(v):
    """A JSON-able, version-independent form of a default value."""
    if isinstance(v, enum.Enum):
        v = v.value
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and all(x is None or isinstance(x, (bool, int, float, str)) for x in v):
        return list(v)
    if isinstance(v, dict) and not v:
        return {}
    return f"<{type(v).__name__}>"


def _forwards_unchanged(src: str) -> bool:
    """An ``__init__`` whose statements are calls (the warning) and one ``super().__init__(*args,
    **kwargs)``: nothing assigned, nothing added to what reaches the base."""
    try:
        fn = ast.parse(src).body[0]
    except (SyntaxError, IndexError):
        return False
    supers = 0
    for stmt in fn.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) and t.id not in ("args", "kwargs")
                                                for t in stmt.targets):
            continue  # the warning's text
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            return False
        call = stmt.value
        if ast.unparse(call.func) == "super().__init__":
            if ast.unparse(call) != "super().__init__(*args, **kwargs)":
                return False
            supers += 1
    return supers == 1


def _shim_base(obj):
    """The base class of a deprecation shim, the name it stood for: a subclass of one class whose
    only members are a ``deprecation_message`` and/or an ``__init__(self, *args, **kwargs)`` that
    warns and calls ``super().__init__(*args, **kwargs)`` unchanged (diffusers' ``CrossAttention``,
    ``models.unet_2d_condition.UNet2DConditionOutput``). A subclass that passes anything else on
    (transformers' ``HybridCache``, the Llama scaling rotary embeddings) configures its base: no shim."""
    if not inspect.isclass(obj) or len(obj.__bases__) != 1:
        return None
    own = {k for k in vars(obj) if k not in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
                                             "__annotations__", "__firstlineno__", "__static_attributes__")}
    if not own or not own <= {"__init__", "deprecation_message"}:
        return None
    if "__init__" in own:
        try:
            src = inspect.getsource(obj.__init__)
            params = list(inspect.signature(obj.__init__).parameters.values())
        except (OSError, TypeError, ValueError):
            return None
        kinds = [p.kind for p in params[1:]]
        if kinds != [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD] or "deprecat" not in src:
            return None
        if not _forwards_unchanged(textwrap.dedent(src)):
            return None
    return obj.__bases__[0]


def _canonical(obj) -> str | None:
    """``module:qualname`` of where ``obj`` is defined (``module:`` for an object without a
    qualname); None for a typing ``Union`` alias (defined where it is found) and plain values."""
    if getattr(obj, "__origin__", None) is typing.Union:
        return None
    try:
        obj = inspect.unwrap(obj)  # functools.lru_cache / wraps: the wrapped function
    except Exception:  # noqa: BLE001
        pass
    shim = _shim_base(obj)
    if shim is not None:
        obj = shim
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(mod, str):
        return None
    if isinstance(qual, str) and "<" not in qual and (inspect.isclass(obj) or inspect.isfunction(obj)):
        return f"{mod}:{qual}"
    return f"{mod}:"


def _module_names(name: str, want=None) -> dict | None:
    try:
        mod = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - absent in this release
        return None
    out = {}
    lazy = type(mod).__name__ == "_LazyModule"  # getattr imports the submodule: only the wanted names
    for n in dir(mod):
        if n.startswith("_") or "." in n:
            continue
        if lazy and (want is None or n not in want):
            out[n] = None  # getattr would import the submodule: kept without its location
            continue
        try:
            obj = getattr(mod, n)
        except Exception:  # noqa: BLE001 - a lazy name that fails to import here
            out[n] = None
            continue
        if inspect.ismodule(obj):
            continue
        out[n] = _canonical(obj)
    return out


def _params(fn) -> list | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return [[p.name, p.kind.name, "<required>" if p.default is p.empty else _value(p.default)]
            for p in sig.parameters.values()]


def _popped(fn) -> list:
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return []
    return sorted(set(re.findall(r"kwargs\.pop\(\s*[\"'](\w+)[\"']", src)))


def _fields(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            d = _value(f.default)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            try:
                d = _value(f.default_factory())  # type: ignore[misc]
            except Exception:  # noqa: BLE001
                d = "<factory>"
        else:
            d = "<required>"
        out[f.name] = [d, str(f.metadata.get("help", ""))[:400]]
    return out


def _deprecations(lib: str) -> list:
    """``deprecate_kwarg("old", version=..., new_name="new")`` uses in the library's source."""
    try:
        root = os.path.dirname(importlib.import_module(lib).__file__)
    except Exception:  # noqa: BLE001
        return []
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for fname in files:
            if not fname.endswith(".py"):
                continue
            path = os.path.join(dirpath, fname)
            try:
                text = open(path, encoding="utf-8").read()
            except OSError:
                continue
            if "deprecate_kwarg(" not in text:
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            modname = lib + "." + os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for dec in node.decorator_list:
                    if not (isinstance(dec, ast.Call) and getattr(dec.func, "id", getattr(dec.func, "attr", "")) == "deprecate_kwarg"):
                        continue
                    args = [a.value for a in dec.args if isinstance(a, ast.Constant)]
                    kw = {k.arg: k.value.value for k in dec.keywords if isinstance(k.value, ast.Constant)}
                    old = args[0] if args else kw.get("old_name")
                    if isinstance(old, str):
                        out.append([lib, f"{modname}.{node.name}", old, kw.get("new_name"), str(kw.get("version", ""))])
    return sorted(out)


def probe(want_names: dict | None = None) -> dict:
    """The facts of the versions this interpreter imports. ``want_names``: module -> names whose
    canonical location is wanted (None: every public name)."""
    warnings.simplefilter("ignore")
    versions, files = {}, {}
    for lib in LIBS:
        try:
            m = importlib.import_module(lib)
            versions[lib], files[lib] = m.__version__, m.__file__
        except Exception:  # noqa: BLE001
            versions[lib] = None
    names = {}
    for m in MODULES:
        got = _module_names(m, None if want_names is None else set(want_names.get(m, ())))
        if got is not None:
            names[m] = got
    fields = {}
    for c in DATACLASSES:
        cls = _resolve(c)
        if cls is not None and dataclasses.is_dataclass(cls):
            fields[c] = _fields(cls)
    attrs = {}
    for c in CLASSES:
        cls = _resolve(c)
        if cls is not None:
            attrs[c] = sorted(a for a in dir(cls) if not a.startswith("_"))
    methods = {}
    for m in METHODS:
        fn = _resolve(m)
        if fn is not None:
            methods[m] = _params(fn)
    functions = {}
    for m in FUNCTIONS:
        fn = _resolve(m)
        if fn is not None:
            functions[m] = _params(fn)
            # huggingface_hub 0.x's @validate_hf_hub_args took use_auth_token= for every token= (the
            # wrapper's own code names it; the signature, which follows __wrapped__, does not)
            wrappers, f = [], fn
            while hasattr(f, "__wrapped__") and len(wrappers) < 8:
                wrappers.append(getattr(f, "__code__", None))
                f = f.__wrapped__
            if (functions[m] is not None and any(c is not None and ("use_auth_token" in c.co_consts or "smoothly_deprecate_use_auth_token" in c.co_names)
                                                  for c in wrappers)
                    and "use_auth_token" not in {p[0] for p in functions[m]}):
                functions[m].append(["use_auth_token", "KEYWORD_ONLY", "<validate_hf_hub_args>"])
    fp = {}
    for m in FROM_PRETRAINED:
        fn = _resolve(m)
        if fn is not None:
            fp[m] = sorted({p[0] for p in _params(fn) or ()} | set(_popped(fn)))
    gen = {}
    cls = _resolve("transformers.GenerationConfig")
    if cls is not None:
        gen = {k: _value(v) for k, v in sorted(cls().to_dict().items()) if not k.startswith("_")}
    deps = []
    for lib in ("transformers", "diffusers", "trl", "peft", "accelerate"):
        deps += _deprecations(lib)
    return {"versions": versions, "files": files, "names": names, "fields": fields, "attrs": attrs,
            "methods": methods, "functions": functions, "from_pretrained": fp, "generation_config": gen, "deprecations": deps}


# ----------------------------------------------------------------------------------- diff side

RENAMED_HELP = re.compile(r"(?:use of|[Uu]se|in favou?r of|renamed (?:to|into))\s+`?-*(\w+)`?")


def _target_names():
    sys.path.insert(0, REPO)
    from migrator.selfcheck.targetapi import api  # noqa: PLC0415 - stdlib-only loader of the repo's data

    return api()


def _present_in_target(module: str, name: str, target_names: dict) -> bool:
    got = target_names.get(module)
    return got is not None and name in got


def _moved_to(module: str, name: str, canonical: str | None, target_names: dict) -> str | None:
    if not canonical:
        return None
    cmod, _, cqual = canonical.partition(":")
    if "." in cqual:
        return None
    if _present_in_target(module, cqual, target_names):
        return f"{module}.{cqual}"
    # the public package of the canonical module (transformers.generation for transformers.generation.utils)
    parts = cmod.split(".")
    for i in range(2, len(parts) + 1):
        cand = ".".join(parts[:i])
        if _present_in_target(cand, cqual, target_names):
            return f"{cand}.{cqual}"
    # a private module's object is reached through the library's root (huggingface_hub._commit_api's
    # CommitOperationAdd, which 0.x's hf_api re-exported, is huggingface_hub.CommitOperationAdd)
    if any(p.startswith("_") for p in parts[1:]) and _present_in_target(parts[0], cqual, target_names):
        return f"{parts[0]}.{cqual}"
    return None


def diff(olds: dict[str, dict], target: dict) -> dict:
    eras = list(olds)  # oldest first

    def last_having(pred):
        for era in reversed(eras):
            if pred(olds[era]):
                return era
        return None

    target_names = {m: set(v) for m, v in target["names"].items()}
    target_api = _target_names()  # the self-check's data: a static scan sees conditionally defined names too
    removed_names: dict = {}
    all_modules = sorted({m for o in olds.values() for m in o["names"]})
    for m in all_modules:
        old_names = sorted({n for o in olds.values() for n in o["names"].get(m, {})})
        for n in old_names:
            if (m in target_names and n in target_names[m]) or target_api.name_exists(m, n) is True:
                continue
            era = last_having(lambda o, m=m, n=n: n in o["names"].get(m, {}))
            canonical = olds[era]["names"][m][n]
            if canonical and canonical.split(".", 1)[0].split(":", 1)[0] != m.split(".", 1)[0]:
                continue  # a re-export of another library's object (typing.Dict, torch, a logger)
            entry = {"last": olds[era]["versions"][m.split(".")[0]]}
            moved = _moved_to(m, n, canonical, target_names)
            if moved:
                entry["moved_to"] = moved
            removed_names.setdefault(m, {})[n] = entry
    removed_attrs: dict = {}
    for c in CLASSES:
        new = set(target["attrs"].get(c, ()))
        if not new:
            continue
        for era in eras:
            for a in olds[era]["attrs"].get(c, ()):
                if a not in new:
                    removed_attrs.setdefault(c, {})[a] = olds[era]["versions"][c.split(".")[0]]
    fields: dict = {}
    for c in DATACLASSES:
        new = target["fields"].get(c)
        if new is None:
            continue
        removed, defaults = {}, {}
        for era in eras:
            old = olds[era]["fields"].get(c, {})
            lib_v = olds[era]["versions"][c.split(".")[0]]
            for f, (d, help_) in old.items():
                if f not in new:
                    entry = removed.get(f, {})
                    entry["last"] = lib_v
                    hit = next((h.group(1) for h in RENAMED_HELP.finditer(help_ or "")
                                if h.group(1) in new and h.group(1) != f), None)
                    if hit:
                        entry["renamed_to"] = hit
                    removed[f] = entry
                elif new[f][0] != d and d not in ("<factory>", "<required>"):
                    defaults[f] = [d, new[f][0], lib_v]
        if removed or defaults:
            fields[c] = {"removed": removed, "defaults": defaults}
    methods: dict = {}
    for m in METHODS:
        new = target["methods"].get(m)
        if new is None:
            continue
        olds_m = [(era, olds[era]["methods"].get(m)) for era in eras if olds[era]["methods"].get(m) is not None]
        if not olds_m:
            continue
        first_era, first = olds_m[0]
        last_era, last = olds_m[-1]
        added = [p for p in new if p[0] not in {q[0] for q in first}]
        if last != new or added:
            methods[m] = {"old": first, "old_version": olds[first_era]["versions"][m.split(".")[0]],
                          "last": olds[last_era]["versions"][m.split(".")[0]], "new": new, "added": added}
    functions: dict = {}
    for m in FUNCTIONS:
        new = target.get("functions", {}).get(m)
        if new is None:
            continue
        names = {p[0] for p in new}
        gone: dict = {}
        for era in eras:
            for p in olds[era].get("functions", {}).get(m) or ():
                if p[0] not in names and p[1] not in ("VAR_POSITIONAL", "VAR_KEYWORD"):
                    gone[p[0]] = olds[era]["versions"][m.split(".")[0]]
        if gone:
            functions[m] = {"removed": gone, "new": new}
    from_pretrained = {}
    for m in FROM_PRETRAINED:
        new = set(target["from_pretrained"].get(m, ()))
        gone = {}
        for era in eras:
            for k in olds[era]["from_pretrained"].get(m, ()):
                if k not in new and k not in ("self", "cls", "kwargs", "model_args"):
                    gone[k] = olds[era]["versions"][m.split(".")[0]]
        if gone:
            from_pretrained[m] = gone
    gen_removed, gen_defaults = {}, {}
    new_gen = target["generation_config"]
    for era in eras:
        for k, v in olds[era]["generation_config"].items():
            tv = olds[era]["versions"]["transformers"]
            if k not in new_gen:
                gen_removed[k] = tv
            elif new_gen[k] != v:
                gen_defaults[k] = [v, new_gen[k], tv]
    deprecations = sorted({tuple(d) + (olds[era]["versions"][d[0]],) for era in eras for d in olds[era]["deprecations"]})
    # one row per (where, old): the newest release that had it
    dep_rows = {}
    for d in deprecations:
        dep_rows[(d[1], d[2])] = list(d)
    return {
        "removed_names": removed_names,
        "removed_attrs": removed_attrs,
        "fields": fields,
        "methods": methods,
        "functions": functions,
        "from_pretrained": from_pretrained,
        "generation_config": {"removed": gen_removed, "defaults": gen_defaults},
        "deprecations": sorted(dep_rows.values()),
    }


def target_side(target: dict, data: dict) -> dict:
    """The target facts the data's rules rely on (checked offline by the test)."""
    tracked = {c: sorted({f for f in v["defaults"]} | {r["renamed_to"] for r in v["removed"].values() if "renamed_to" in r})
               for c, v in data["fields"].items()}
    return {
        "versions": {k: v for k, v in target["versions"].items() if v},
        "fields": {c: {f: target["fields"][c][f][0] for f in fs} for c, fs in tracked.items()},
        "methods": {m: target["methods"][m] for m in data["methods"]},
        "functions": {m: target["functions"][m] for m in data.get("functions", {})},
        "moved_to": sorted({e["moved_to"] for m in data["removed_names"].values() for e in m.values() if "moved_to" in e}),
    }


def _probe_env(python: str, want: dict | None = None) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)
    args = [python, os.path.abspath(__file__), "--probe"]
    proc = subprocess.run(args, input=json.dumps(want) if want else "", capture_output=True, text=True, env=env,
                          cwd="/tmp", timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"probe with {python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_venvs() -> None:
    for era, reqs in ERAS.items():
        path = os.path.join(VENV_ROOT, era)
        if not os.path.exists(os.path.join(path, "bin", "python")):
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", path], check=True)
        subprocess.run([os.path.join(path, "bin", "pip"), "install", "-q", *reqs], check=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", action="store_true", help="print the facts of the running interpreter's versions")
    ap.add_argument("--make-venvs", action="store_true", help=f"create the era venvs under {VENV_ROOT}")
    ap.add_argument("--check-target", action="store_true", help="check the committed data's target side (offline)")
    ap.add_argument("--prune-present", action="store_true",
                    help="drop the removed names that the target API data (tools/gen_target_api.py) now has "
                         "(offline; run after regenerating that data)")
    a = ap.parse_args(argv)
    if a.probe:
        raw = sys.stdin.read() if not sys.stdin.isatty() else ""
        print(json.dumps(probe(json.loads(raw) if raw.strip() else None)))
        return 0
    if a.make_venvs:
        make_venvs()
        return 0
    if a.prune_present:
        with gzip.open(OUT, "rt", encoding="utf-8") as f:
            data = json.load(f)
        target_api = _target_names()
        pruned = 0
        for m in list(data["removed_names"]):
            for n in [n for n in data["removed_names"][m] if target_api.name_exists(m, n) is True]:
                del data["removed_names"][m][n]  # the rule diff() applies: a name the target has is not removed
                pruned += 1
            if not data["removed_names"][m]:
                del data["removed_names"][m]
        with gzip.GzipFile(OUT, "wb", mtime=0) as f:
            f.write(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
        print(f"pruned {pruned} removed names the target has; wrote {OUT}", file=sys.stderr)
        return 0
    if a.check_target:
        with gzip.open(OUT, "rt", encoding="utf-8") as f:
            data = json.load(f)
        fresh = target_side(probe(), data)
        problems = [k for k in ("fields", "methods", "functions") if fresh.get(k) != data["target"].get(k)]
        if problems:
            print(f"target side changed: {problems}", file=sys.stderr)
            return 1
        return 0
    target = probe()
    olds = {}
    for era in ERAS:
        python = os.path.join(VENV_ROOT, era, "bin", "python")
        got = _probe_env(python)
        for lib, f in got["files"].items():
            if f and not f.startswith(os.path.join(VENV_ROOT, era)):
                raise SystemExit(f"{era}: {lib} {got['versions'][lib]} is not the venv's own ({f}): a target leaked in")
        # second pass: where each name the target lacks lived (getattr only on those)
        want = {m: sorted(n for n in ns if n not in target["names"].get(m, {})) for m, ns in got["names"].items()}
        got["names"] = _probe_env(python, want)["names"]
        olds[era] = got
        print(era, {k: v for k, v in got["versions"].items() if v}, file=sys.stderr)
    data = diff(olds, target)
    data["target"] = target_side(target, data)
    data["old"] = {era: {k: v for k, v in o["versions"].items() if v} for era, o in olds.items()}
    data["generated_by"] = "tools/gen_upgrade_api.py"
    data["command"] = "python tools/gen_upgrade_api.py --make-venvs && python tools/gen_upgrade_api.py"
    data["date"] = datetime.date.today().isoformat()
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:
        f.write(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
