"""NM105-NM107: placement and hub calls around models this tool migrates.

* NM105 -- ``device_map="auto"`` on Transformers/Diffusers ``from_pretrained`` and on
  ``transformers.pipeline`` becomes ``device_map="neuron"`` / ``device="neuron"``, in units that
  import the old Neuron stack (so the unit is being migrated to Neuron). In the other files of a
  project that has old-stack code it gets a marker (project context: ``project_triggers``); a
  project that never ran on Neuron keeps its ``"auto"`` unreported.
* NM106 -- ``inputs = tokenizer(...).to(model.device)`` (or ``.to("neuron")``, ``.to(device)``,
  ``inputs = inputs.to(...)``) whose name only feeds ``.generate(...)`` in the same scope: the move is
  removed; ``generate`` moves what each forward consumes, and the growing tensors stay on CPU.
* NM107 -- optimum-neuron's ``model.push_to_hub(local_dir, repository_id=X)`` becomes
  ``model.push_to_hub(X)`` on models loaded through an optimum.neuron class; reads of
  ``input_static_shapes`` get a marker.
"""

from __future__ import annotations

import re


import libcst as cst

from codemods.common.export_only import export_only_model
from codemods.common.hardware import MIXED, NEURON, OTHER, branch_hardware
from codemods.common.leftovers import old_stack
from codemods.common.renames import load_table
from migrator.rules import PythonContext, PythonRule

#: substrings of the old-stack imports (the pre-filter: units without them never reach these rules)
OLD_STACK_TRIGGERS = ("optimum.neuron", "optimum import", "torch_xla", "torch_neuronx", "transformers_neuronx",
                      "neuronx_distributed")
#: libraries whose ``from_pretrained(device_map=...)`` takes a device name
LOADERS = ("transformers.", "diffusers.")
PIPELINES = ("transformers.pipeline", "transformers.pipelines.pipeline")


def migrates(ctx: PythonContext) -> bool:
    """True when the unit imports the Neuron stack: the old one, or the torch_neuronx plugin of a
    script already half-way to TorchNeuron (cached per unit)."""
    state = ctx.local_state()
    if "old" not in state:
        state["old"] = any(old_stack(b.qualified) or b.qualified.split(".")[0] == "torch_neuronx"
                           for b in ctx.imports.all_bindings())
    return state["old"]


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:  # pragma: no cover - malformed literal
            return None
        return value if isinstance(value, str) else None
    return None


def _neuron_like(node: cst.SimpleString) -> cst.SimpleString:
    """``"neuron"`` with the quotes (and prefix) of ``node``."""
    raw = node.value
    i = 0
    while raw[i] not in "'\"":
        i += 1
    quote = raw[i:i + 3] if raw[i:i + 3] in ('"""', "'''") else raw[i]
    return cst.SimpleString(f"{raw[:i]}{quote}neuron{quote}")


REPORT = ('device_map="auto" does not detect Neuron (Accelerate has no Neuron branch: the model loads on CPU '
          "without an error); this project is being migrated to Neuron: use {fix} where this code runs on "
          "Trainium, or mark the line `# neuron-migrate: ignore[NM105]` if it never does")


class DeviceMapAuto(PythonRule):
    id = "NM105"
    title = "device_map='auto' does not detect Neuron -> device_map='neuron' / device='neuron'"
    fix = "mixed"
    triggers = OLD_STACK_TRIGGERS
    # the plain-Transformers files of a project that is being migrated get a marker (see caveats)
    project_triggers = ('device_map="auto"', "device_map='auto'")
    why = """
        Accelerate's `device_map="auto"` places a model on the devices that
        `accelerate.utils.modeling.get_max_memory` lists (accelerate 1.15: npu, mlu, sdaa, musa, xpu,
        hpu, otherwise cuda, then cpu -- there is no Neuron branch); Transformers resolves "auto" through
        it (`transformers.integrations.accelerate._get_device_map`). On a Trainium/Inferentia host the
        model therefore loads on CPU without an error. In a unit migrated from the old Neuron stack,
        `from_pretrained(..., device_map="auto")` of a Transformers or Diffusers class becomes
        `device_map="neuron"`, and `transformers.pipeline(..., device_map="auto")` becomes
        `device="neuron"`.
    """
    before = """
        import torch_xla.core.xla_model as xm
        from transformers import AutoModelForSequenceClassification, pipeline

        device = xm.xla_device()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", device_map="auto")
        classifier = pipeline("text-classification", model="bert-base-uncased", device_map="auto")
    """
    after = """
        import torch
        from transformers import AutoModelForSequenceClassification, pipeline

        device = torch.device("neuron")
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", device_map="neuron")
        classifier = pipeline("text-classification", model="bert-base-uncased", device="neuron")
    """
    caveats = """
        Only units that import the old stack (optimum.neuron, torch_xla, torch_neuronx,
        transformers_neuronx, neuronx_distributed) are edited. Elsewhere in a project that has old-stack code
        (a file of the same run matched), `device_map="auto"` gets a marker instead of a rewrite: such a file
        may also serve CUDA machines, which "auto" suits; silence it with `# neuron-migrate: ignore[NM105]`.
        Projects with no old-stack code at all, and a file migrated on its own, are not reported.
        A call in another machine's branch (`if torch.cuda.is_available():`, `elif device == "cuda":`, the
        `else` of `if device == "neuron":`; codemods/common/hardware.py) is left alone; a branch whose test
        lets both Neuron and another machine in (`device in ("cuda", "neuron")`) gets a marker.
        Not handled: `device_map` passed through `**kwargs` or `model_kwargs={"device_map": "auto"}`, non-literal
        values, Diffusers pipelines (`DiffusionPipeline.from_pretrained` accepts no "auto"), a `pipeline()` call
        that already has `device=`. Calls on optimum.neuron classes/pipelines are left to their own rules
        (NM101-NM104).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        state = ctx.local_state()
        if "on" not in state:  # once per unit, not once per call
            # "fix" in a unit migrated from the old stack; "report" elsewhere in such a project
            state["on"] = "device_map" in ctx.source and (
                "fix" if migrates(ctx) else "report" if ctx.in_project else None)
        if not state["on"]:
            return
        arg = next((a for a in node.args if a.keyword is not None and a.keyword.value == "device_map"), None)
        if arg is None or _string(arg.value) != "auto":
            return
        func = node.func
        qual = ctx.qualname(func)
        if qual in PIPELINES or (isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained"):
            branch = branch_hardware(ctx)
            if branch is not None and branch.kind == OTHER:
                return  # another machine's branch (`elif device == "cuda":`): "auto" suits it
            if branch is not None and branch.kind == MIXED and state["on"] == "fix":
                ctx.marker(arg, f'`{branch.test}` lets Neuron and another machine in: use device_map="neuron" '
                                "where this runs on Trainium")
                return
        if qual in PIPELINES:
            if ctx.owner(qual) not in (None, self.id):
                return
            if any(a.keyword is not None and a.keyword.value == "device" for a in node.args):
                return
            if state["on"] == "report":
                ctx.marker(arg, REPORT.format(fix='device="neuron"'))
                return
            new_value = _neuron_like(arg.value)  # type: ignore[arg-type]

            def to_device(updated: cst.Call) -> cst.Call:
                args = [a.with_changes(keyword=cst.Name("device"), value=new_value)
                        if a.keyword is not None and a.keyword.value == "device_map" else a for a in updated.args]
                return updated.with_changes(args=args)

            ctx.replace(node, to_device)
            ctx.finding(arg, 'pipeline(device_map="auto") -> device="neuron" (Accelerate\'s "auto" does not '
                             "detect Neuron and loads on CPU)")
            return
        if not (isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained"):
            return
        owner_qual = ctx.qualname(func.value)
        if owner_qual is None or not owner_qual.startswith(LOADERS):
            return
        if ctx.owner(owner_qual) not in (None, self.id):
            return
        if owner_qual.startswith("diffusers.") and owner_qual.endswith("Pipeline"):
            return  # diffusers pipelines take no device_map="auto"; left as written
        if state["on"] == "report":
            ctx.marker(arg, REPORT.format(fix='device_map="neuron"'))
            return
        ctx.replace(arg.value, _neuron_like(arg.value))  # type: ignore[arg-type]
        ctx.finding(arg, 'device_map="auto" -> device_map="neuron" (Accelerate\'s "auto" does not detect Neuron '
                         "and loads on CPU)")


# --------------------------------------------------------------------------- NM106

SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
FIELDS = ("input_ids", "attention_mask")
XLA_DEVICES = ("torch_xla.core.xla_model.xla_device", "torch_xla.device")


def _is_generate(node: cst.CSTNode | None) -> bool:
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "generate")


def _device_arg(node: cst.BaseExpression, ctx: PythonContext) -> bool:
    """``model.device``, ``"neuron"``, ``device``, ``torch.device("neuron")`` or ``xm.xla_device()``."""
    if isinstance(node, cst.Attribute) and node.attr.value == "device":
        return True
    if isinstance(node, cst.Name) and node.value == "device":
        return True
    value = _string(node)
    if value is not None:
        return value == "neuron" or value.startswith("neuron:")
    if isinstance(node, cst.Call) and ctx.qualname(node.func) in XLA_DEVICES:
        return True
    if isinstance(node, cst.Call) and ctx.qualname(node.func) == "torch.device" and len(node.args) == 1:
        value = _string(node.args[0].value)
        return value is not None and (value == "neuron" or value.startswith("neuron:"))
    return False


def _is_candidate(node: cst.Assign, ctx: PythonContext) -> bool:
    """``name = <expr>.to(<neuron device>)``."""
    if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
        return False
    value = node.value
    return (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to"
            and len(value.args) == 1 and value.args[0].keyword is None and not value.args[0].star
            and _device_arg(value.args[0].value, ctx))


def _use_ok(name: cst.Name, anc: tuple[cst.CSTNode, ...]) -> bool | None:
    """True: a use only generate (or a shape read) sees; None: not a reference (attribute/keyword name)."""
    parent = anc[-1]
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return None
    if isinstance(parent, cst.Arg) and parent.keyword is name:
        return None
    if isinstance(parent, cst.Arg) and parent.value is name:
        return _is_generate(anc[-2])
    if isinstance(parent, cst.Attribute) and parent.value is name and parent.attr.value == "shape":
        return True
    expr: cst.CSTNode = name
    i = len(anc) - 1
    if isinstance(parent, cst.Attribute) and parent.value is name and parent.attr.value in FIELDS:
        expr = parent
    elif (isinstance(parent, cst.Subscript) and parent.value is name and len(parent.slice) == 1
          and isinstance(parent.slice[0].slice, cst.Index) and _string(parent.slice[0].slice.value) in FIELDS):
        expr = parent
    else:
        return False
    above = anc[i - 1]
    if isinstance(above, cst.Arg) and above.value is expr:
        return _is_generate(anc[i - 2])
    if isinstance(above, cst.Attribute) and above.value is expr and above.attr.value == "shape":
        return True
    return False


class GenerationInputsOnCpu(PythonRule):
    id = "NM106"
    title = "Generation inputs stay on CPU: .to(model.device) before generate() removed"
    fix = "auto"
    triggers = OLD_STACK_TRIGGERS
    why = """
        Transformers' `generate()` moves the tensors each forward consumes onto the model's device right
        before the call (`GenerationMixin.prepare_inputs_for_generation`, transformers 5.23: "It lets the
        caller intentionally keep inputs on a different device (e.g. Neuron/TPU) so the generation loop's
        growing-tensor bookkeeping stays off-device"). Keeping `input_ids`/`attention_mask` on CPU means
        the tensors that grow by one token per step never become new device shapes, so the compiled
        Neuron graph stays stable. In a migrated unit, `.to(model.device)` / `.to("neuron")` /
        `.to(device)` on tokenizer output that only feeds `generate()` is removed.
    """
    before = """
        import torch_xla.core.xla_model as xm

        device = xm.xla_device()

        def answer(model, tokenizer, prompt):
            inputs = tokenizer(prompt, return_tensors="pt").to(device)
            outputs = model.generate(**inputs, max_new_tokens=32)
            return tokenizer.decode(outputs[0][inputs["input_ids"].shape[1]:])
    """
    after = """
        import torch

        device = torch.device("neuron")

        def answer(model, tokenizer, prompt):
            inputs = tokenizer(prompt, return_tensors="pt")
            outputs = model.generate(**inputs, max_new_tokens=32)
            return tokenizer.decode(outputs[0][inputs["input_ids"].shape[1]:])
    """
    caveats = """
        Only when every use of the name in its scope (the function, or the whole module for top-level code)
        is an argument of a `.generate(...)` call (`**inputs`, `inputs`, `inputs.input_ids`,
        `inputs["attention_mask"]`) or a `.shape` read of those fields, and the name is assigned once (or
        once plus `inputs = inputs.to(...)`). Any other use (a forward call, a loop, a nested function, a
        return) leaves the move in place, and so does a move in another machine's branch
        (`if torch.cuda.is_available():`; codemods/common/hardware.py).
    """

    def handlers(self):
        return {cst.Module: self._on_module, cst.Assign: self._on_assign, cst.Name: self._on_name}

    # Collected during the shared pass (no walk of its own): the candidate assignments and the
    # references to their names, with their ancestors; decided and edited in finish().
    def _on_module(self, node: cst.Module, ctx: PythonContext) -> None:
        state = ctx.local_state()
        state["candidates"], state["names"], state["watch"] = [], {}, set()
        if ".to(" in ctx.source and "generate" in ctx.source and migrates(ctx):
            # every name assigned somewhere: only their references are recorded
            state["watch"] = set(re.findall(r"^[ \t]*(\w+)[ \t]*=(?!=)", ctx.source, re.M))

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        state = ctx.local_state()
        if state["watch"] and _is_candidate(node, ctx):
            branch = branch_hardware(ctx)
            if branch is not None and branch.kind != NEURON:
                return  # another machine's branch (or one that cannot be told): its move stays
            scope = next((s for s in reversed(ctx.stack) if isinstance(s, SCOPES)), None)
            state["candidates"].append((node, node.targets[0].target.value, (scope,) if scope is not None else ()))

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        state = ctx.local_state()
        if node.value in state["watch"]:
            state["names"].setdefault(node.value, []).append((node, tuple(ctx.stack[:-1])))

    def finish(self, ctx: PythonContext) -> None:
        state = ctx.local_state()
        for cand, name, scope in state.get("candidates", ()):
            scope_node = scope[0] if scope else None
            ok = True
            generate = False
            others: list[cst.Assign] = []
            value = cand.value
            self_form = isinstance(value.func.value, cst.Name) and value.func.value.value == name  # type: ignore[attr-defined]
            for ref, anc in state["names"].get(name, []):
                if scope_node is not None and scope_node not in anc:
                    continue
                if cand in anc:
                    continue  # the assignment itself (and `inputs.to(...)` in the self form)
                parent = anc[-1]
                if isinstance(parent, cst.AssignTarget) and parent.target is ref and isinstance(anc[-2], cst.Assign):
                    others.append(anc[-2])
                    continue
                use = _use_ok(ref, anc)
                if use is None:
                    continue
                if not use:
                    ok = False
                    break
                generate = True
            if not ok or not generate:
                continue
            if self_form:
                if len(others) != 1:
                    continue
                ctx.remove_statement(cand)
                ctx.finding(cand, "inputs.to(...) removed: generate() moves the inputs to the model, the growing "
                                  "tensors stay on CPU")
            else:
                if others:
                    continue
                ctx.replace(value, lambda new: new.func.value)
                ctx.finding(value, f".to({ctx.module.code_for_node(value.args[0].value)})"
                                   " removed: generate() moves the inputs to the model, the growing tensors stay on CPU")


# --------------------------------------------------------------------------- NM107

PUSH_KEEP = ("private", "token", "revision")


class NeuronModelHubCalls(PythonRule):
    id = "NM107"
    markers = (
        ("Remove {args} from push_to_hub() and pass the repository id first.", """The native push_to_hub
        (Transformers PreTrainedModel or diffusers DiffusionPipeline) takes the repository id as its first
        argument and pushes the object itself; these optimum-neuron arguments have no equivalent there
        (DiffusionPipeline.push_to_hub(repo_id, commit_message, private, token, ...) takes no revision)."""),
        ("Replace {attribute} by the batch size and length you pad the inputs to.", """A native model has no
        compiled input shapes (optimum-neuron's input_static_shapes): TorchNeuron compiles one graph per input
        shape, so the shapes are the ones you pad the inputs to."""),
    )
    title = "optimum-neuron push_to_hub(local_dir, repository_id=X) -> push_to_hub(X); input_static_shapes reads"
    fix = "mixed"
    # both only matter on a model loaded through an optimum.neuron class (`push_to_hub` alone is in
    # every Hugging Face project)
    triggers = ("optimum.neuron", "optimum import")
    why = """
        optimum-neuron models pushed a local directory of compiled artifacts:
        `push_to_hub(save_directory, repository_id, private=None, revision=None, token=True, endpoint=None)`.
        A Transformers model pushes itself: `push_to_hub(repo_id, *, commit_message=None, private=None,
        token=None, revision=None, ...)`. On a model loaded through an optimum.neuron class the call becomes
        `model.push_to_hub(X)` (`private`, `token`, `revision` kept). `input_static_shapes` (the compiled
        input shapes of a traced model) does not exist on a native model: `model.input_static_shapes["key"]`
        becomes the literal the load passed as `key=` (the shape the inputs are padded to); other reads
        get a marker.
    """
    before = """
        from optimum.neuron import NeuronModelForCausalLM

        model = NeuronModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B", export=True, batch_size=1, sequence_length=512)
        model.save_pretrained("out")
        model.push_to_hub("out", repository_id="me/llama-neuron")
        print(model.generate(max_new_tokens=8))
    """
    after = """
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B", device_map="neuron")
        model.generation_config.cache_implementation = "static"
        model.generation_config.max_cache_len = 512
        model.save_pretrained("out")
        model.push_to_hub("me/llama-neuron")
        print(model.generate(max_new_tokens=8))
    """
    caveats = """
        The model must be a name (or `self.attr`) assigned from `<optimum.neuron class>.from_pretrained(...)`
        in the same unit. `endpoint=` and arguments in `**kwargs` get a marker. A model that is only exported and
        saved or pushed (an export-only script) is left as it is, push_to_hub included: the load has a marker
        saying the step is obsolete (codemods/common/export_only.py). The pushed repository now holds
        the model's weights (not compiled artifacts).
    """

    def handlers(self):
        return {cst.Module: self._on_module, cst.Call: self._on_call, cst.Attribute: self._on_attribute}

    def _on_module(self, node: cst.Module, ctx: PythonContext) -> None:
        state = ctx.local_state()
        state["models"], state["shapes"], state["owner"] = set(), {}, {}
        if ("push_to_hub" not in ctx.source and "input_static_shapes" not in ctx.source) or not migrates(ctx):
            return
        code = node.code_for_node

        class Find(cst.CSTVisitor):
            def visit_Assign(self, assign: cst.Assign) -> None:
                value = assign.value
                if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                        and value.func.attr.value == "from_pretrained"):
                    return
                qual = ctx.class_qualname(value.func.value)
                if qual is None or not qual.startswith("optimum.neuron."):
                    return
                shapes = {a.keyword.value: a.value for a in value.args
                          if a.keyword is not None and isinstance(a.value, cst.Integer)}
                rename = load_table().get(qual)
                owner = ("DiffusionPipeline" if rename is not None and rename.target.startswith("diffusers.")
                         else "a Transformers model's")
                for t in assign.targets:
                    if isinstance(t.target, (cst.Name, cst.Attribute)):
                        state["models"].add(code(t.target))
                        state["shapes"][code(t.target)] = shapes
                        state["owner"][code(t.target)] = owner

        node.visit(Find())

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "push_to_hub"):
            return
        models = ctx.local_state().get("models", ())
        model = ctx.module.code_for_node(func.value)
        if model not in models or export_only_model(ctx, model):
            return  # (an export-only load stays as it is, with its marker: so does its push_to_hub)
        owner = ctx.local_state()["owner"][model]
        args = list(node.args)
        if any(a.star for a in args):
            ctx.marker(node, "optimum-neuron's push_to_hub(save_directory, repository_id, ...) became "
                             "push_to_hub(repo_id, ...): pass the repository id first and drop the directory")
            return
        positional = [a for a in args if a.keyword is None]
        kw = {a.keyword.value: a for a in args if a.keyword is not None}
        repo = kw.get("repository_id") or (positional[1] if len(positional) > 1 else None)
        if repo is None or len(positional) > 2:
            return  # already push_to_hub(repo_id, ...)
        # DiffusionPipeline.push_to_hub(repo_id, commit_message, private, token, ...) takes no revision
        allowed = PUSH_KEEP if owner != "DiffusionPipeline" else ("private", "token")
        unknown = [k for k in kw if k not in ("save_directory", "repository_id", "use_auth_token", *allowed)]
        if unknown:
            ctx.marker(node, f"Remove {', '.join(unknown)} from push_to_hub() and pass the repository id first.")
            return
        if "use_auth_token" in kw and "token" in kw:
            ctx.marker(node, f"push_to_hub(): {owner} push_to_hub rejects use_auth_token (use token=): drop it")
            return
        repo_value = repo.value

        def rewrite(updated: cst.Call) -> cst.Call:
            keep = []
            for a in updated.args:
                if a.keyword is not None and a.keyword.value == "use_auth_token":
                    keep.append(a.with_changes(keyword=cst.Name("token")))  # the name push_to_hub takes now
                elif a.keyword is not None and a.keyword.value in allowed:
                    keep.append(a)
            first = cst.Arg(value=repo_value)
            new = [first, *keep]
            new = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(new) - 1 else
                   a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                   for i, a in enumerate(new)]
            return updated.with_changes(args=new)

        ctx.replace(node, rewrite)
        ctx.finding(node, "push_to_hub(local_dir, repository_id=X) -> push_to_hub(X): "
                          + ("a diffusers pipeline" if owner == "DiffusionPipeline" else "a Transformers model")
                          + " pushes itself" + ("; use_auth_token= -> token=" if "use_auth_token" in kw else ""))

    @staticmethod
    def _known_shape(node: cst.Attribute, parent: cst.CSTNode | None, ctx: PythonContext) -> cst.Integer | None:
        """The literal of ``model.input_static_shapes["key"]`` when the load passed ``key=<int>``."""
        if not (isinstance(parent, cst.Subscript) and parent.value is node and len(parent.slice) == 1
                and isinstance(parent.slice[0].slice, cst.Index)):
            return None
        key = _string(parent.slice[0].slice.value)
        shapes = ctx.local_state().get("shapes", {}).get(ctx.module.code_for_node(node.value), {})
        return shapes.get(key) if key is not None else None

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        if node.attr.value != "input_static_shapes" or ctx.qualname(node) is not None or not migrates(ctx):
            return
        parent = ctx.parent
        value = self._known_shape(node, parent, ctx)
        written = isinstance(ctx.stack[-3] if len(ctx.stack) > 2 else None, (cst.AssignTarget, cst.AugAssign, cst.Del))
        if value is not None and parent is not None and not written:
            ctx.replace(parent, value)
            ctx.finding(parent, f"{ctx.module.code_for_node(parent)} -> {value.value}, the shape the model was "
                                "compiled for (pad the inputs to it)")
            return
        ctx.marker(node, f"Replace {ctx.module.code_for_node(node)} by the batch size and length you pad the inputs to.")


RULES = (DeviceMapAuto, GenerationInputsOnCpu, NeuronModelHubCalls)
