"""Generate ``migrator/selfcheck/target_api.json.gz``: the target stack's API facts.

The self-check (``migrator.selfcheck``) reads this data through
``migrator.selfcheck.targetapi`` to tell whether a migrated file's imports resolve
and whether the keyword arguments it passes are accepted by the *installed, pinned*
target libraries (torch, transformers, trl, diffusers, peft, accelerate,
sentence_transformers).

How to run (offline; only the installed libraries are read)::

    python tools/gen_target_api.py            # (re)write the data file
    python tools/gen_target_api.py --check    # compare with the committed file, exit 1 on a difference
    python tools/gen_target_api.py --probe    # also run the empirical from_pretrained probes and print them

When: on every version bump of any target library (the data records the versions it
was generated from; ``tests/test_target_api.py`` regenerates it and compares byte for
byte, and skips when the installed versions differ from the recorded ones). Commit the
regenerated file together with the version bump.

What is recorded
----------------
* ``modules``: every module/package of each target root, found by walking the
  installed package directories (plus dynamic modules present in ``sys.modules``
  after importing the roots, e.g. the submodules of ``torch._C``); extension modules
  are listed in ``ext`` (their submodules are unknown, not absent).
* ``names``: public top-level names per module: a static ``ast`` scan of every
  top-level binding (all ``if``/``try`` branches, star imports resolved), united with
  ``dir()`` of every module that importing the roots (and the lazy packages
  transformers/diffusers/trl) loaded. Modules whose names cannot be known
  exhaustively (module ``__getattr__``, ``globals()`` tricks, unresolved star
  imports) are listed in ``open_names``.
* ``removed_tasks``: the ``pipeline()`` tasks Transformers removed and what it says to use instead.
* ``sigs``/``callables``/``aliases``: keyword signatures of the public callables the
  self-check cares about, each distinct signature stored once. ``**kwargs`` are
  analysed statically (keys popped/read from it; forwarded/stored -> open) except for
  the cases decided empirically (see ``--probe`` and the notes in ``main``):

  - ``PreTrainedModel.from_pretrained`` (and the Auto model classes): unknown keywords
    go to ``config.from_pretrained``; those that are config attributes override the
    config, the rest reach the model's ``__init__`` and raise ``TypeError``. So the
    accepted set = explicit params + popped keys + config attributes (``PreTrainedConfig``
    attributes, fields defined by at least ``COMMON_CONFIG_MIN`` model configs, the
    model package's own config fields) + model ``__init__`` extra params.
  - ``DiffusionPipeline.from_pretrained``: popped keys + the pipeline's ``__init__``
    params; anything else is ignored with a warning (value lost) -> not accepted.
  - ``ModelMixin.from_pretrained`` (diffusers models): popped keys + the model's
    ``__init__`` (config) params.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import importlib
import importlib.metadata
import inspect
import io
import json
import multiprocessing
import os
import sys
import textwrap
import time
import types
import warnings

ROOTS = ("torch", "transformers", "trl", "diffusers", "peft", "accelerate", "sentence_transformers")
DISTS = {
    "torch": "torch",
    "transformers": "transformers",
    "trl": "trl",
    "diffusers": "diffusers",
    "peft": "peft",
    "accelerate": "accelerate",
    "sentence_transformers": "sentence-transformers",
}
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "migrator", "selfcheck", "target_api.json.gz")
# a config attribute counts as "common" (accepted by every Auto*.from_pretrained) when
# at least this many model configuration classes define it
COMMON_CONFIG_MIN = 8
SKIP_DIRS = {"__pycache__"}
EXT_SUFFIXES = (".so", ".pyd")
CLASS_INFO_ROOTS = ("transformers", "diffusers")
FROM_METHODS = ("from_pretrained", "from_config", "from_single_file")

TORCH_CALLABLES = (
    "torch.compile",
    "torch.distributed.init_process_group",
    "torch.distributed.new_group",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.utils.data.DataLoader",
    "torch.utils.data.DistributedSampler",
    "torch.save",
    "torch.load",
    "torch.optim.AdamW",
    "torch.autocast",
    "torch.amp.autocast",
)


# --------------------------------------------------------------------------- static scan


def _bound_names(target, out):
    if isinstance(target, ast.Name):
        out.add(target.id)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            _bound_names(elt, out)
    elif isinstance(target, ast.Starred):
        _bound_names(target.value, out)


def _abs_module(mod, is_pkg, level, name):
    if not level:
        return name
    parts = mod.split(".")
    if not is_pkg:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{name}" if name else base


def _str_list(node):
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value for e in node.elts]
    return None


def kwargs_usage(func, kw):
    """Keys a function reads from its ``**kw`` and whether it passes it on/stores it.

    Returns (extra_keys, open, forwards_to_super_init_only).
    """
    extras = set()
    literal_lists = []
    dynamic_key = False
    open_ = False
    super_only = True
    forwarded_super = False
    parents = {}
    for node in ast.walk(func):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            sl = _str_list(node)
            if sl:
                literal_lists.append(sl)
    for node in ast.walk(func):
        if not (isinstance(node, ast.Name) and node.id == kw):
            continue
        p = parents.get(node)
        if isinstance(p, ast.Attribute) and p.attr in ("pop", "get", "setdefault"):
            call = parents.get(p)
            if isinstance(call, ast.Call) and call.args:
                a = call.args[0]
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    extras.add(a.value)
                else:
                    dynamic_key = True
            continue
        if isinstance(p, ast.Subscript) and p.value is node:
            s = p.slice
            if isinstance(s, ast.Constant) and isinstance(s.value, str):
                extras.add(s.value)
            else:
                dynamic_key = True
            continue
        if isinstance(p, ast.Compare) and node in p.comparators:
            if isinstance(p.left, ast.Constant) and isinstance(p.left.value, str):
                extras.add(p.left.value)
            else:
                dynamic_key = True
            continue
        if isinstance(p, (ast.If, ast.UnaryOp, ast.BoolOp, ast.FormattedValue, ast.JoinedStr)):
            continue
        if isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id in ("len", "bool", "repr", "str"):
            continue
        # inside a raise: an error path, the value is not accepted
        q, in_raise = p, False
        while q is not None:
            if isinstance(q, ast.Raise):
                in_raise = True
                break
            q = parents.get(q)
        if in_raise:
            continue
        if isinstance(p, ast.keyword) and p.arg is None:
            call = parents.get(p)
            f = getattr(call, "func", None)
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "__init__"
                and isinstance(f.value, ast.Call)
                and isinstance(f.value.func, ast.Name)
                and f.value.func.id == "super"
            ):
                forwarded_super = True
                continue
        open_ = True
        super_only = False
    if dynamic_key:
        for sl in literal_lists:
            extras.update(sl)
    return extras, open_, (forwarded_super and super_only and not open_)


def static_sig(fn):
    """(params, has_kwargs, extras, open, super_only) of an ast FunctionDef."""
    a = fn.args
    params = [x.arg for x in a.args] + [x.arg for x in a.kwonlyargs]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    if a.kwarg is None:
        return params, False, [], False, False
    extras, open_, sup = kwargs_usage(fn, a.kwarg.arg)
    return params, True, sorted(extras), open_, sup


def scan_file(args):
    path, mod, is_pkg, root = args
    try:
        with open(path, "rb") as f:
            src = f.read()
        tree = ast.parse(src)
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return mod, None
    names, stars = set(), []
    getattr_ = False
    all_names = []
    text = src.decode("utf-8", "replace")
    dynamic = "globals()" in text or "sys.modules[__name__]" in text or "setattr(sys.modules" in text

    def visit(body):
        nonlocal getattr_
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(st.name)
                if st.name == "__getattr__" and not isinstance(st, ast.ClassDef):
                    getattr_ = True
            elif isinstance(st, ast.Assign):
                for t in st.targets:
                    _bound_names(t, names)
                    if isinstance(t, ast.Name) and t.id == "__all__":
                        sl = _str_list(st.value)
                        all_names.append(sl)
            elif isinstance(st, (ast.AnnAssign, ast.AugAssign)):
                _bound_names(st.target, names)
                if isinstance(st.target, ast.Name) and st.target.id == "__all__" and st.value is not None:
                    sl = _str_list(st.value)
                    all_names.append(sl)
            elif isinstance(st, ast.Import):
                for al in st.names:
                    names.add(al.asname or al.name.split(".")[0])
            elif isinstance(st, ast.ImportFrom):
                src_mod = _abs_module(mod, is_pkg, st.level, st.module)
                for al in st.names:
                    if al.name == "*":
                        stars.append(src_mod)
                    else:
                        names.add(al.asname or al.name)
            elif isinstance(st, (ast.For, ast.AsyncFor)):
                _bound_names(st.target, names)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                for it in st.items:
                    if it.optional_vars is not None:
                        _bound_names(it.optional_vars, names)
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                f = st.value.func
                # __all__.extend([...]) / __all__.append("x")
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "__all__":
                    all_names.append(None)
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(st, field, None)
                if sub and not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(sub)
            for h in getattr(st, "handlers", []) or []:
                if h.name:
                    names.add(h.name)
                visit(h.body)
            if isinstance(st, ast.Match):
                for c in st.cases:
                    visit(c.body)

    visit(tree.body)
    # `global X` inside functions binds module attributes when run
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            names.update(node.names)
    if all_names and all(x is not None for x in all_names):
        dunder_all = sorted({n for x in all_names for n in x})
    else:
        dunder_all = None
    classes = None
    if root in CLASS_INFO_ROOTS:
        classes = {}
        base = mod.rsplit(".", 1)[-1]
        is_config_file = base.startswith("configuration_")
        for st in tree.body:
            if not isinstance(st, ast.ClassDef):
                continue
            bases = []
            for b in st.bases:
                if isinstance(b, ast.Name):
                    bases.append(b.id)
                elif isinstance(b, ast.Attribute):
                    bases.append(b.attr)
            info = {"bases": bases, "defs": []}
            for item in st.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if item.name in FROM_METHODS:
                        info["defs"].append(item.name)
                    if item.name == "__init__":
                        info["init"] = static_sig(item)
            if is_config_file:
                fields = set()
                for item in st.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        fields.add(item.target.id)
                    elif isinstance(item, (ast.FunctionDef,)) and item.name in ("__init__", "__post_init__"):
                        for node in ast.walk(item):
                            if (
                                isinstance(node, ast.Attribute)
                                and isinstance(node.ctx, ast.Store)
                                and isinstance(node.value, ast.Name)
                                and node.value.id == "self"
                            ):
                                fields.add(node.attr)
                        if item.name == "__init__":
                            fields.update(static_sig(item)[0])
                info["fields"] = sorted(f for f in fields if not f.startswith("_"))
            classes[st.name] = info
    return mod, {
        "names": sorted(names),
        "stars": stars,
        "getattr": getattr_,
        "dynamic": dynamic,
        "all": dunder_all,
        "classes": classes,
    }


def walk_modules():
    """(module -> (path or None, is_pkg)), extension modules set, jobs for the scanner."""
    mods, ext, jobs = {}, set(), []
    for root in ROOTS:
        spec = importlib.util.find_spec(root)
        pkg_dir = os.path.dirname(spec.origin)
        for dirpath, dirnames, filenames in os.walk(pkg_dir):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and d.isidentifier())
            rel = os.path.relpath(dirpath, pkg_dir)
            prefix = root if rel == "." else root + "." + rel.replace(os.sep, ".")
            has_py = any(f.endswith(".py") for f in filenames)
            if not has_py and not any(f.endswith(EXT_SUFFIXES) for f in filenames):
                continue
            # namespace packages (no __init__.py) are importable too
            mods.setdefault(prefix, (None, True))
            for fn in sorted(filenames):
                if fn.endswith(".py"):
                    stem = fn[:-3]
                    if not stem.isidentifier():
                        continue
                    path = os.path.join(dirpath, fn)
                    if stem == "__init__":
                        mods[prefix] = (path, True)
                        jobs.append((path, prefix, True, root))
                    else:
                        m = f"{prefix}.{stem}"
                        mods[m] = (path, False)
                        jobs.append((path, m, False, root))
                elif fn.endswith(EXT_SUFFIXES):
                    stem = fn.split(".")[0]
                    if stem.isidentifier():
                        m = f"{prefix}.{stem}"
                        mods.setdefault(m, (None, False))
                        ext.add(m)
    return mods, ext, jobs


# --------------------------------------------------------------------------- runtime part


def import_roots():
    warnings.simplefilter("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    loaded = {}
    for r in ROOTS:
        loaded[r] = importlib.import_module(r)
    # a few commonly imported subpackages that are cheap to load
    for m in (
        "torch.distributed",
        "torch.utils.data",
        "torch.nn.parallel",
        "torch.amp",
        "torch.optim",
        "transformers.generation",
        "transformers.models.auto",
        "transformers.trainer_utils",
        "transformers.utils",
        "transformers.integrations",
        "diffusers.pipelines",
        "diffusers.models",
        "diffusers.schedulers",
        "diffusers.utils",
        "peft.tuners",
        "accelerate.utils",
        "trl.trainer",
    ):
        try:
            importlib.import_module(m)
        except Exception:  # noqa: BLE001 - optional, best effort
            pass
    return loaded


def runtime_sig(fn):
    """(params, extras, open) for a runtime callable, following super().__init__(**kwargs)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params, varkw = [], None
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            params.append(p.name)
        elif p.kind == p.VAR_KEYWORD:
            varkw = p.name
    if params and params[0] in ("self", "cls") and not inspect.ismethod(fn):
        params = params[1:]
    if varkw is None:
        return params, [], False
    func = inspect.unwrap(getattr(fn, "__func__", fn))
    try:
        src = textwrap.dedent(inspect.getsource(func))
        tree = ast.parse(src)
        node = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    except (OSError, TypeError, SyntaxError, StopIteration):
        return params, [], True
    extras, open_, super_only = kwargs_usage(node, varkw)
    return params, sorted(extras), open_ or super_only  # super handled by class_call_sig


def class_call_sig(cls):
    """Signature of calling a class: its __init__ (following super().__init__(**kwargs))."""
    import dataclasses

    if dataclasses.is_dataclass(cls):
        r = runtime_sig(cls)
        return r
    params, extras, open_ = [], set(), False
    seen = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            sig = inspect.signature(init)
        except (TypeError, ValueError):
            return (params, sorted(extras), True) if params else None
        ps = [p for p in sig.parameters.values()]
        varkw = next((p.name for p in ps if p.kind == p.VAR_KEYWORD), None)
        for p in ps[1:]:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in seen:
                seen.add(p.name)
                params.append(p.name)
        if varkw is None:
            return params, sorted(extras), open_
        try:
            src = textwrap.dedent(inspect.getsource(inspect.unwrap(init)))
            node = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        except (OSError, TypeError, SyntaxError, StopIteration):
            return params, sorted(extras), True
        ex, o, sup = kwargs_usage(node, varkw)
        extras |= ex
        if o:
            return params, sorted(extras), True
        if not sup:
            return params, sorted(extras), False
        # forwards **kwargs to super().__init__: continue with the next __init__ in the MRO
    return params, sorted(extras), True


class SigTable:
    def __init__(self):
        self.sigs, self.index, self.callables, self.aliases = [], {}, {}, {}

    def add(self, qualname, params, extras=(), open_=False, sets=()):
        key = (" ".join(sorted(set(params))), " ".join(sorted(set(extras) - set(params))), int(bool(open_)), tuple(sorted(sets)))
        if key not in self.index:
            self.index[key] = len(self.sigs)
            self.sigs.append(key)
        self.callables[qualname] = self.index[key]

    def alias(self, alias, canonical):
        if alias != canonical and alias not in self.callables:
            self.aliases.setdefault(alias, canonical)


def _star_names(mod) -> list[str]:
    """What ``from mod import *`` binds: its ``__all__``, else its public attributes that are not
    modules (a submodule is an attribute only once something imported it: counting those made the
    data depend on what the generating process had imported)."""
    exported = getattr(mod, "__all__", None)
    if exported is not None:
        return [n for n in exported if isinstance(n, str)]
    return [n for n in dir(mod) if not n.startswith("_") and not isinstance(vars(mod).get(n), types.ModuleType)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    ap.add_argument("--probe", action="store_true", help="run the empirical from_pretrained probes and print them")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    t0 = time.time()

    mods, ext, jobs = walk_modules()
    # biggest files first so both workers stay busy
    jobs.sort(key=lambda j: -os.path.getsize(j[0]))
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(max(1, min(2, os.cpu_count() or 1)))
    async_res = pool.map_async(scan_file, jobs, chunksize=16)
    pool.close()

    lib = import_roots()
    tf, df = lib["transformers"], lib["diffusers"]
    versions = {r: importlib.metadata.version(DISTS[r]) for r in ROOTS}

    sigs = SigTable()
    sets = {}

    def add_runtime(qual, obj, public_alias=None):
        if inspect.isclass(obj):
            try:
                r = class_call_sig(obj)
            except Exception:  # noqa: BLE001
                r = None
            if r is not None:
                sigs.add(qual, r[0], r[1], r[2])
            for meth in FROM_METHODS:
                try:
                    m = getattr(obj, meth, None)
                except Exception:  # noqa: BLE001 - dummy objects of missing backends
                    m = None
                if m is not None and callable(m):
                    r = runtime_sig(m)
                    if r is not None:
                        sigs.add(f"{qual}.{meth}", *r)
        elif callable(obj):
            r = runtime_sig(obj)
            if r is not None:
                sigs.add(qual, *r)
        mod = getattr(obj, "__module__", None)
        qn = getattr(obj, "__qualname__", None)
        if mod and qn and "<" not in qn:
            sigs.alias(f"{mod}.{qn}", qual)

    # ---- (d) torch callables
    for q in TORCH_CALLABLES:
        modname, _, attr = q.rpartition(".")
        obj = getattr(importlib.import_module(modname), attr)
        add_runtime(q, obj)

    # ---- (b) trl, peft, accelerate, sentence_transformers: every public top-level class/function
    for r in ("trl", "peft", "accelerate", "sentence_transformers"):
        m = lib[r]
        for name in sorted(dir(m)):
            if name.startswith("_"):
                continue
            try:
                obj = getattr(m, name)
            except Exception:  # noqa: BLE001
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                add_runtime(f"{r}.{name}", obj)

    # ---- wait for the static scan
    scans = async_res.get()
    pool.join()
    scan = {m: s for m, s in scans if s is not None}

    # class index for transformers/diffusers: name -> [(module, info)]
    class_index = {}
    for m in sorted(scan):
        for cname, info in (scan[m]["classes"] or {}).items():
            class_index.setdefault(cname, []).append((m, info))

    def find_class(cname, near_mod):
        cands = class_index.get(cname) or []
        for m, info in cands:
            if m == near_mod:
                return m, info
        if cands:
            # prefer the same top-level package
            root = near_mod.split(".")[0]
            same = [c for c in cands if c[0].split(".")[0] == root]
            return (same or cands)[0]
        return None

    def definer(cname, mod, meth, stop, depth=0):
        """Module.Class that defines `meth` for class cname (static MRO walk, depth-first)."""
        found = find_class(cname, mod)
        if found is None or depth > 40:
            return None
        m, info = found
        if cname in stop:
            return f"{m}.{cname}"
        if meth in info["defs"]:
            return f"{m}.{cname}"
        for b in info["bases"]:
            d = definer(b, m, meth, stop, depth + 1)
            if d:
                return d
        return None

    def static_init(cname, mod, depth=0):
        """(params, open) of calling a class, statically, following in-package bases."""
        found = find_class(cname, mod)
        if found is None or depth > 40:
            return None
        m, info = found
        if "init" in info:
            params, has_kw, extras, open_, sup = info["init"]
            if sup:
                for b in info["bases"]:
                    parent = static_init(b, m, depth + 1)
                    if parent is not None:
                        return sorted(set(params) | set(parent[0]) | set(extras)), parent[1]
                return params + extras, True
            return params + extras, open_
        for b in info["bases"]:
            r = static_init(b, m, depth + 1)
            if r is not None:
                return r
        return None

    # ---- transformers config attributes
    PreTrainedConfig = tf.PreTrainedConfig
    base_cfg = set()
    try:
        base_cfg |= {k for k in vars(PreTrainedConfig()) if not k.startswith("_")}
    except Exception:  # noqa: BLE001
        pass
    for k, v in inspect.getmembers(PreTrainedConfig):
        if k.startswith("_"):
            continue
        if isinstance(v, property) or not callable(v):
            base_cfg.add(k)
    base_cfg |= set(runtime_sig(PreTrainedConfig)[0])
    field_count, pkg_fields = {}, {}
    for m in sorted(scan):
        if m.startswith("transformers.models.") and m.rsplit(".", 1)[-1].startswith("configuration_"):
            pkg = m.rsplit(".", 1)[0]
            for cname, info in (scan[m]["classes"] or {}).items():
                if not cname.endswith("Config"):
                    continue
                for f in info.get("fields", []):
                    field_count[f] = field_count.get(f, 0) + 1
                pkg_fields.setdefault(pkg, set()).update(info.get("fields", []))
    common_cfg = {f for f, n in field_count.items() if n >= COMMON_CONFIG_MIN}
    sets["config_base"] = base_cfg
    sets["config_common"] = common_cfg
    for pkg, fields in pkg_fields.items():
        sets["config:" + pkg] = fields - base_cfg - common_cfg

    # model __init__ extra params (besides config): per class statically; union for the Auto classes
    model_init_union = set()
    model_init = {}
    for m in sorted(scan):
        if m.startswith("transformers.models.") and m.rsplit(".", 1)[-1].startswith("modeling_"):
            for cname, info in (scan[m]["classes"] or {}).items():
                if "init" not in info:
                    continue
                params, has_kw, extras, open_, sup = info["init"]
                ps = [p for p in params + extras if p not in ("config",)]
                model_init[(m, cname)] = ps
                model_init_union.update(ps)

    # PreTrainedModel.from_pretrained: params + keys popped here and by config.from_pretrained
    from transformers.modeling_utils import PreTrainedModel

    fp_params, fp_extras, _ = runtime_sig(PreTrainedModel.from_pretrained)
    cfg_pop = set()
    for meth in ("from_pretrained", "get_config_dict", "_get_config_dict", "from_dict"):
        f = getattr(PreTrainedConfig, meth, None)
        if f is not None:
            r = runtime_sig(f)
            if r:
                cfg_pop |= set(r[0]) | set(r[1])
    sets["model_from_pretrained"] = (set(fp_params) | set(fp_extras) | cfg_pop) - {"pretrained_model_name_or_path", "kwargs", "return_unused_kwargs"}
    sets["model_init_common"] = model_init_union - sets["model_from_pretrained"]

    # ---- (a) transformers top-level
    c2m = tf._class_to_module
    tf_names = sorted(n for n in dir(tf) if not n.startswith("_"))
    wanted_suffix = ("Trainer", "TrainingArguments", "Config", "Pipeline")
    for name in tf_names:
        modrel = c2m.get(name)
        full_mod = f"transformers.{modrel}" if modrel else None
        base = modrel.rsplit(".", 1)[-1] if modrel else ""
        qual = f"transformers.{name}"
        if full_mod:
            sigs.alias(f"{full_mod}.{name}", qual)
            pkg = full_mod.rsplit(".", 1)[0]
            if pkg.startswith("transformers.models."):
                sigs.alias(f"{pkg}.{name}", qual)
        is_model_mod = modrel is not None and modrel.startswith("models.") and base.startswith("modeling_")
        is_config_mod = modrel is not None and modrel.startswith("models.") and base.startswith("configuration_")
        if is_model_mod and not name.startswith("Auto"):
            if name not in ((scan.get(full_mod) or {}).get("classes") or {}):
                continue
            pkg = full_mod.rsplit(".", 1)[0]
            d = definer(name, full_mod, "from_pretrained", {"PreTrainedModel"})
            if d is None:
                continue
            if d.endswith(".PreTrainedModel"):
                own = static_init(name, full_mod)
                own_params = [p for p in (own[0] if own else []) if p != "config"]
                sigs.add(
                    f"{qual}.from_pretrained",
                    ["pretrained_model_name_or_path"],
                    own_params,
                    False,
                    ["model_from_pretrained", "config_base", "config_common", "config:" + pkg],
                )
            else:
                try:
                    obj = getattr(tf, name)
                except Exception:  # noqa: BLE001
                    continue
                r = runtime_sig(obj.from_pretrained)
                if r:
                    sigs.add(f"{qual}.from_pretrained", *r)
            continue
        if is_config_mod and name.endswith("Config"):
            pkg = full_mod.rsplit(".", 1)[0]
            # calling a model config: its fields + PreTrainedConfig's; strict dataclasses accept (and store) any kwarg
            sigs.add(qual, [], [], True, ["config_base", "config:" + pkg, "config_common"])
            sigs.add(f"{qual}.from_pretrained", ["pretrained_model_name_or_path"], [], True)
            continue
        if not (name.startswith("Auto") or name.endswith(wanted_suffix) or name in ("PreTrainedModel", "PreTrainedTokenizerBase", "pipeline")):
            # other top-level classes: only their from_pretrained, via the static MRO, when cheap
            if modrel and (scan.get(full_mod) or {}).get("classes", {}) and name in scan[full_mod]["classes"]:
                d = definer(name, full_mod, "from_pretrained", set())
                if d:
                    dmod, dcls = d.rsplit(".", 1)
                    try:
                        obj = getattr(importlib.import_module(dmod), dcls)
                        r = runtime_sig(obj.from_pretrained)
                        if r:
                            sigs.add(f"{qual}.from_pretrained", *r)
                    except Exception:  # noqa: BLE001
                        pass
            continue
        try:
            obj = getattr(tf, name)
        except Exception:  # noqa: BLE001
            continue
        add_runtime(qual, obj)

    # Auto model classes: _BaseAutoModelClass.from_pretrained -> config.from_pretrained -> model.from_pretrained
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    auto_params, auto_extras, _ = runtime_sig(_BaseAutoModelClass.from_pretrained)
    for name in tf_names:
        if not name.startswith("Auto"):
            continue
        obj = getattr(tf, name, None)
        if inspect.isclass(obj) and issubclass(obj, _BaseAutoModelClass):
            sigs.add(
                f"transformers.{name}.from_pretrained",
                auto_params,
                auto_extras,
                False,
                ["model_from_pretrained", "config_base", "config_common", "model_init_common"],
            )
    # tokenizers keep unknown kwargs as init kwargs; configs keep them as attributes
    for name in ("AutoTokenizer", "AutoConfig", "AutoProcessor", "AutoImageProcessor", "AutoFeatureExtractor", "AutoVideoProcessor"):
        if hasattr(tf, name):
            sigs.add(f"transformers.{name}.from_pretrained", ["pretrained_model_name_or_path"], [], True)
    sigs.add("transformers.PreTrainedModel.from_pretrained", fp_params, [], False, ["model_from_pretrained", "config_base", "config_common", "model_init_common"])
    sigs.alias("transformers.modeling_utils.PreTrainedModel", "transformers.PreTrainedModel")

    # ---- (c) diffusers pipelines and models (static: importing them all is slow)
    from diffusers import DiffusionPipeline, ModelMixin

    dp_params, dp_extras, _ = runtime_sig(DiffusionPipeline.from_pretrained)
    mm_params, mm_extras, _ = runtime_sig(ModelMixin.from_pretrained)
    sets["pipeline_from_pretrained"] = set(dp_params) | set(dp_extras)
    sets["diffusers_model_from_pretrained"] = set(mm_params) | set(mm_extras)
    # the generic DiffusionPipeline loads the class model_index.json names: any of that class's
    # components (vae=, text_encoder_2=, ...) is a valid keyword: open
    sigs.add("diffusers.DiffusionPipeline.from_pretrained", dp_params, dp_extras, True)
    sigs.add("diffusers.ModelMixin.from_pretrained", mm_params, mm_extras, False)
    d_c2m = df._class_to_module
    for name in sorted(n for n in dir(df) if not n.startswith("_")):
        modrel = d_c2m.get(name)
        if not modrel:
            continue
        # diffusers' lazy structure maps names to their subpackage only: find the defining module statically
        pkg_mod = f"diffusers.{modrel}"
        cands = [m for m, _ in class_index.get(name, ()) if m == pkg_mod or m.startswith(pkg_mod + ".")]
        if not cands:
            continue
        full_mod = cands[0]
        qual = f"diffusers.{name}"
        sigs.alias(f"{full_mod}.{name}", qual)
        sigs.alias(f"{pkg_mod}.{name}", qual)
        init = static_init(name, full_mod)
        if init is not None:
            sigs.add(qual, init[0], [], init[1])
        for meth in FROM_METHODS:
            d = definer(name, full_mod, meth, {"DiffusionPipeline", "ModelMixin"})
            if d is None:
                continue
            init_params = [p for p in (init[0] if init else [])]
            if name == "DiffusionPipeline" and meth == "from_pretrained":
                continue  # the generic loader, open (above)
            if d.endswith(".DiffusionPipeline") and meth == "from_pretrained":
                # unknown kwargs are ignored with a warning (value lost): not accepted
                sigs.add(f"{qual}.{meth}", ["pretrained_model_name_or_path"], init_params, False, ["pipeline_from_pretrained"])
            elif d.endswith(".ModelMixin") and meth == "from_pretrained":
                sigs.add(f"{qual}.{meth}", ["pretrained_model_name_or_path"], init_params, False, ["diffusers_model_from_pretrained"])
            else:
                dmod, dcls = d.rsplit(".", 1)
                try:
                    obj = getattr(importlib.import_module(dmod), dcls)
                    r = runtime_sig(getattr(obj, meth))
                    if r:
                        sigs.add(f"{qual}.{meth}", *r)
                except Exception:  # noqa: BLE001
                    pass

    # ---- names per module
    mod_names = {m: set(s["names"]) for m, s in scan.items()}
    open_names = {m for m, s in scan.items() if s["getattr"] or s["dynamic"]}
    dunder_all = {m: s["all"] for m, s in scan.items()}
    runtime_mods = {}
    for m, obj in list(sys.modules.items()):
        if m.split(".")[0] in ROOTS and isinstance(obj, type(sys)):
            runtime_mods[m] = obj
            mods.setdefault(m, (None, False))
    # star imports
    unresolved = {}
    changed = True
    while changed:
        changed = False
        for m, s in scan.items():
            for src in s["stars"]:
                if src in scan:
                    exported = dunder_all.get(src) or [n for n in mod_names.get(src, ()) if not n.startswith("_")]
                elif src in sys.modules:
                    exported = _star_names(sys.modules[src])
                else:
                    unresolved.setdefault(m, set()).add(src)
                    continue
                before = len(mod_names[m])
                mod_names[m].update(exported)
                if len(mod_names[m]) != before:
                    changed = True
    open_names |= set(unresolved)
    for m, obj in runtime_mods.items():
        try:
            d = dir(obj)
        except Exception:  # noqa: BLE001
            open_names.add(m)
            continue
        mod_names.setdefault(m, set()).update(d)
        if "__getattr__" in vars(obj):
            open_names.add(m)
        else:
            # imported: dir() is exhaustive (lazy modules list their lazy names)
            open_names.discard(m)
    # transformers v5 keeps the legacy `XTokenizerFast` names importable: its lazy module's __getattr__ falls back
    # to `XTokenizer` (one backend class per model); dir() does not list them, so each is asked for
    for m, obj in runtime_mods.items():
        if m.split(".")[0] == "transformers" and type(obj).__name__ == "_LazyModule":
            for n in sorted(mod_names.get(m, ())):
                if n.endswith("Tokenizer") and n + "Fast" not in mod_names[m]:
                    try:
                        getattr(obj, n + "Fast")
                    except Exception:  # noqa: BLE001
                        continue
                    mod_names[m].add(n + "Fast")
    # static-only modules that build themselves lazily (not imported here): their names are uncertain
    for m, s in scan.items():
        if m not in runtime_mods and s["dynamic"]:
            open_names.add(m)

    data = {
        "generated_by": "tools/gen_target_api.py (static ast scan of the installed packages + runtime dir()/inspect; "
        f"COMMON_CONFIG_MIN={COMMON_CONFIG_MIN}; python {sys.version_info.major}.{sys.version_info.minor})",
        "versions": versions,
        "modules": sorted(mods),
        "ext": sorted(ext),
        "names": {m: " ".join(sorted(n for n in ns if not n.startswith("_"))) for m, ns in sorted(mod_names.items()) if m in mods},
        "open_names": sorted(m for m in open_names if m in mods),
        "sets": {k: " ".join(sorted(v)) for k, v in sorted(sets.items())},
        "sigs": [[p, x, o, list(s)] for p, x, o, s in sigs.sigs],
        "callables": dict(sorted(sigs.callables.items())),
        "aliases": dict(sorted((a, c) for a, c in sigs.aliases.items() if a not in sigs.callables)),
        "tp_plans": tensor_parallel_model_types(tf),
        "removed_tasks": removed_pipeline_tasks(),
    }
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    blob = buf.getvalue()
    el = time.time() - t0
    print(
        f"modules={len(data['modules'])} names={len(data['names'])} open={len(data['open_names'])} "
        f"sigs={len(data['sigs'])} callables={len(data['callables'])} aliases={len(data['aliases'])} "
        f"raw={len(raw)} gz={len(blob)} bytes in {el:.1f}s",
        file=sys.stderr,
    )
    probe_kw = ("export", "batch_size", "sequence_length", "num_cores", "auto_cast_type", "compiler_args", "use_flash_attention_2",
                "num_labels", "torch_dtype", "dtype", "device_map", "attn_implementation", "trust_remote_code", "use_cache",
                "revision", "token", "low_cpu_mem_usage", "distributed_config")
    auto_all = set(auto_params) | set(auto_extras) | set().union(*(sets[k] for k in ("model_from_pretrained", "config_base", "config_common", "model_init_common")))
    print("AutoModelForCausalLM.from_pretrained: " + ", ".join(f"{k}={'accepted' if k in auto_all else 'REJECTED'}" for k in probe_kw), file=sys.stderr)
    if args.probe:
        run_probes(probe_kw, auto_all)
    if args.check:
        try:
            with open(args.out, "rb") as f:
                old = f.read()
        except FileNotFoundError:
            old = b""
        if old != blob:
            print(f"{args.out} differs from a fresh generation; run python tools/gen_target_api.py", file=sys.stderr)
            return 1
        print("up to date", file=sys.stderr)
        return 0
    with open(args.out, "wb") as f:
        f.write(blob)
    return 0


def removed_pipeline_tasks() -> dict[str, str]:
    """The pipeline() tasks Transformers removed, with what it says to use instead
    (``transformers.pipelines.REMOVED_TASKS``; ``translation_xx_to_yy`` went with ``translation``)."""
    import transformers.pipelines as pipelines

    return dict(sorted(getattr(pipelines, "REMOVED_TASKS", {}).items()))


def tensor_parallel_model_types(tf) -> list[str]:
    """The Transformers model types whose config carries a ``base_model_tp_plan``: the architectures
    ``from_pretrained(..., distributed_config=DistributedConfig(tp_size>1))`` can shard (others raise
    "has no tp_plan")."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out = []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            config = CONFIG_MAPPING[model_type]
        except Exception:  # noqa: BLE001 - a config whose module needs an optional dependency
            continue
        if getattr(config, "base_model_tp_plan", None):
            out.append(model_type)
    del tf
    return out


def run_probes(probe_kw, auto_all):
    """Empirical check: which keywords does AutoModelForCausalLM.from_pretrained really take?"""
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    values = {"torch_dtype": torch.float32, "dtype": torch.float32, "device_map": "cpu", "attn_implementation": "eager",
              "trust_remote_code": True, "revision": "main", "token": None, "distributed_config": None, "auto_cast_type": "bf16",
              "compiler_args": {}, "num_labels": 2, "use_cache": False, "low_cpu_mem_usage": True}
    with tempfile.TemporaryDirectory() as d:
        LlamaForCausalLM(cfg).save_pretrained(d)
        for kw in probe_kw:
            try:
                AutoModelForCausalLM.from_pretrained(d, **{kw: values.get(kw, 1)})
                got = "works"
            except (TypeError, ValueError) as e:
                got = f"raises {type(e).__name__}"
            data = "accepted" if kw in auto_all else "rejected"
            print(f"probe {kw}: {got}; data says {data}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
