"""NM524: SageMaker deployment code that picks an XLA-era Neuron container.

NM520 reads a Dockerfile's ``FROM``; deployment code names its image in Python:
``HuggingFaceModel(transformers_version="4.34.1", pytorch_version="1.13.1", ...)`` on an
``ml.inf2``/``ml.trn1`` instance resolves to a Hugging Face Neuron DLC of that era,
``image_uri="...pytorch-inference-neuronx:1.13.1-neuronx-py310-sdk2.15.0-ubuntu20.04"`` names one, and
``get_huggingface_llm_image_uri("huggingface-neuronx")`` returns one. Those images ship torch-xla and
the old torch-neuronx: they cannot install or run the migrated code (Transformers 5, TorchNeuron).
"""

from __future__ import annotations

import libcst as cst

from codemods.project.dockerfile import xla_era_image
from migrator.rules import PythonContext, PythonRule

#: SageMaker estimators and models that take an image, library versions and an instance type
SAGEMAKER_CLASSES = ("HuggingFaceModel", "HuggingFace", "PyTorch", "PyTorchModel", "Model", "Estimator",
                     "HuggingFaceProcessor", "PyTorchProcessor")
#: helpers that return a Neuron DLC's URI for a backend name
IMAGE_HELPERS = ("sagemaker.huggingface.get_huggingface_llm_image_uri", "sagemaker.image_uris.retrieve")
NEURON_INSTANCES = ("ml.inf1", "ml.inf2", "ml.trn1", "ml.trn2")
IMAGE_MESSAGE = "this is an XLA-era Neuron container: deploy with a TorchNeuron image (Neuron SDK 2.33+) instead"
#: first-generation Trainium and second-generation Inferentia: TorchNeuron (Neuron SDK 2.33) supports Trn2/Trn3
OLDER_INSTANCES = ("ml.inf2", "ml.trn1")
OLDER_INSTANCE_MESSAGE = "{instance} is an Inf2/Trn1 instance: TorchNeuron runs on Trn2/Trn3, so run the migrated code on ml.trn2"


def _instance_message(instance: str | None) -> str | None:
    """The marker for an instance type that the migrated code cannot run on, or None."""
    if instance is None:
        return None
    if instance.startswith(("ml.inf1", "ml_inf1")):
        return f"{instance} runs only torch-neuron (Inf1): deploy on an instance TorchNeuron supports"
    if instance.startswith(OLDER_INSTANCES):
        return OLDER_INSTANCE_MESSAGE.format(instance=instance)
    return None


def _literal(node: cst.BaseExpression | None, ctx: PythonContext) -> str | None:
    if isinstance(node, cst.Name):
        node = ctx.local_state().get("assigned", {}).get(node.value)
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(node, cst.FormattedString):  # f"{account}.dkr.ecr.{region}.amazonaws.com/pytorch-...": its text
        return "".join(p.value if isinstance(p, cst.FormattedStringText) else "{}" for p in node.parts)
    return None


class SageMakerNeuronImages(PythonRule):
    id = "NM524"
    title = "SageMaker models and estimators that pick an XLA-era Neuron container"
    fix = "manual"
    triggers = ("sagemaker",)
    why = """
        SageMaker deployment code chooses its container in Python: an `image_uri=` naming an
        XLA-era Neuron Deep Learning Container (the test of NM520), a Hugging Face
        `transformers_version=`/`pytorch_version=` pair (a PyTorch estimator's `framework_version=`) on a Neuron instance (`ml.inf2`,
        `ml.trn1`: SageMaker resolves it to the Neuron image of that era), or
        `get_huggingface_llm_image_uri("huggingface-neuronx")` / `image_uris.retrieve(...neuronx...)`.
        Those images carry torch-xla and the XLA-based torch-neuronx, so the migrated code
        (Transformers 5, native TorchNeuron) does not run in them; `ml.inf1` instances run only
        the first-generation torch-neuron, and TorchNeuron (Neuron SDK 2.33) runs on Trn2/Trn3, not
        on `ml.inf2`/`ml.trn1`. One marker per call says what to change.
    """
    before = """
        from sagemaker.huggingface import HuggingFaceModel

        model = HuggingFaceModel(model_data=s3_uri, role=role, transformers_version="4.34.1",
                                 pytorch_version="1.13.1", py_version="py310")
        model.deploy(initial_instance_count=1, instance_type="ml.inf2.xlarge")
    """
    after = """
        from sagemaker.huggingface import HuggingFaceModel

        # TODO(neuron-migrate NM524): transformers_version="4.34.1" resolves to an XLA-era Neuron image: pass image_uri= a TorchNeuron image
        model = HuggingFaceModel(model_data=s3_uri, role=role, transformers_version="4.34.1",
                                 pytorch_version="1.13.1", py_version="py310")
        model.deploy(initial_instance_count=1, instance_type="ml.inf2.xlarge")
    """
    caveats = """
        Versions are judged only where the file also names a Neuron instance type (`ml.inf*`,
        `ml.trn*`) or a Neuron image: a GPU deployment of the same model is left alone. Images and
        instance types held in variables are read where the variable is assigned a literal once in
        the module.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Assign: self._on_assign, cst.SimpleString: self._on_string}

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            names = ctx.local_state().setdefault("assigned", {})
            name = node.targets[0].target.value
            names[name] = None if name in names else node.value

    def _on_string(self, node: cst.SimpleString, ctx: PythonContext) -> None:
        value = node.evaluated_value
        if isinstance(value, str) and value.startswith(NEURON_INSTANCES):
            ctx.local_state()["neuron_instance"] = True

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func) or ""
        if qual in IMAGE_HELPERS:
            backend = next((_literal(a.value, ctx) for a in node.args), None)
            if isinstance(backend, str) and "neuron" in backend:
                ctx.marker(node, "this returns an XLA-era Neuron container: deploy with a TorchNeuron image instead")
            return
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("deploy", "compile"):
            # `estimator.deploy(instance_type="ml.inf1.xlarge")`, `.compile(target_instance_family="ml_inf1")`: Inf1
            kw = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
            target = _literal(kw.get("instance_type"), ctx) or _literal(kw.get("target_instance_family"), ctx)
            message = _instance_message(target)
            if message is not None:
                ctx.marker(node, message)
            return
        if not (qual.startswith("sagemaker.") and qual.rsplit(".", 1)[-1] in SAGEMAKER_CLASSES):
            return
        kw = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        image = _literal(kw.get("image_uri"), ctx)
        if image is not None and xla_era_image(image):
            ctx.marker(node, IMAGE_MESSAGE)
            return
        instance = _literal(kw.get("instance_type"), ctx)
        older = _instance_message(instance)  # (one marker per call: the image's, else the instance's)
        if older is not None and instance is not None and instance.startswith("ml.inf1"):
            ctx.marker(node, older)
            return
        if "image_uri" not in kw:
            for key in ("transformers_version", "pytorch_version", "framework_version"):
                version = _literal(kw.get(key), ctx)
                if version is not None:
                    message = f"{key}=\"{version}\" resolves to an XLA-era Neuron image: pass image_uri= a TorchNeuron image"
                    ctx.local_state().setdefault("versions", []).append((node, message))
                    return
        if older is not None:
            ctx.marker(node, older)

    def finish(self, ctx: PythonContext) -> None:
        """Versions pick a Neuron image only for a Neuron instance: the file must name one (the
        ``deploy(instance_type=...)`` usually comes after the model)."""
        state = ctx.local_state()
        if state.get("neuron_instance"):
            for node, message in state.get("versions", ()):
                ctx.marker(node, message)


RULES = (SageMakerNeuronImages,)
