"""The names the training rules recognise: the native classes the rename table (NM200/NM300) gives
the old optimum-neuron ones, and the optimum-neuron context managers and loaders they follow.
Shared by every module of :mod:`codemods.training`, imported by none of the names it lists."""

from __future__ import annotations

from codemods.common.renames import load_table


def sources(*targets: str) -> tuple[str, ...]:
    """Every old-stack name the rename table maps to one of ``targets``."""
    return tuple(sorted(s for s, r in load_table().items() if r.target in targets))


ARGS_SOURCES = sources("transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments")
TRAINER_SOURCES = sources("transformers.Trainer", "transformers.Seq2SeqTrainer")
SFT_TRAINER_SOURCES = sources("trl.SFTTrainer")
SFT_CONFIG_SOURCES = sources("trl.SFTConfig")
DISTRIBUTED_CONFIG = "transformers.distributed.DistributedConfig"
LAZY_LOAD = (
    "optimum.neuron.distributed.lazy_load_for_parallelism",
    "optimum.neuron.distributed.utils.lazy_load_for_parallelism",
)
#: the class methods that load a model
LOADERS = ("from_pretrained", "from_config")
#: classes whose from_pretrained loads no model (tokenizers, configs, processors, adapters)
NOT_MODELS = ("Tokenizer", "Config", "Processor", "FeatureExtractor", "Peft")


def imports_a_trainer(ctx) -> bool:
    """Whether the unit imports a trainer class (optimum-neuron's, Transformers' or TRL's ``...Trainer``): its
    models are trained by a Trainer, which cannot train a pipeline-parallel model in transformers 5.23."""
    for b in ctx.imports.all_bindings():
        root, _, last = b.qualified.rpartition(".")
        if last.endswith("Trainer") and root.split(".")[0] in ("optimum", "transformers", "trl"):
            return True
    return False
