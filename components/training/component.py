"""KFP interfaces of the training stage. The logic lives in this package's other modules."""
from typing import Optional

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

from kfp_llmops.components import images


@dsl.component(base_image=images.TRAIN, install_kfp_package=False)
def build_base_model(dataset: Input[Dataset], base_model: Output[Model], size: str = "demo",
                     release_dir: str = "", base_model_uri: str = "", base_model_root: str = "") -> str:
    """The base model to fine-tune: the user's (`base_model_uri`, a sealed Hugging Face
    folder, verified against `base_model_root`), else the demo's (a BPE tokenizer trained
    on the clean data and a small GPT-2-style LM). Returns its Merkle root."""
    from kfp_llmops.components.training import build_base_component

    return build_base_component(dataset, base_model, size, release_dir, base_model_uri, base_model_root)


@dsl.component(base_image=images.TRAIN, install_kfp_package=False)
def train_zero3(
    dataset: Input[Dataset],
    base_model: Input[Model],
    model: Output[Model],
    checkpoints: Output[Artifact],
    metrics: Output[Metrics],
    report: Output[HTML],
    train_log: Output[Artifact],
    config: str = "",
    checkpoint_dir: str = "",
    resume_from: Optional[Input[Artifact]] = None,
    gpus: str = "0",
    release_dir: str = "",
    signing_key_file: str = "",
) -> str:
    """DeepSpeed ZeRO-3 training with Merkle-verified checkpoints; returns the model's root.

    `checkpoint_dir` (e.g. a PVC mount) keeps checkpoints across task retries, so a retry
    resumes from the newest intact one. `gpus` (the pod's GPU limit; a string because it
    is also the accelerator count) sets one rank per GPU; "0" keeps the config's ranks.
    `signing_key_file` (a mounted Secret): the exported model is signed with model-signing.
    """
    from kfp_llmops.components.training import run_component

    return run_component(dataset, base_model, config, resume_from, checkpoint_dir,
                         model, checkpoints, metrics, report, train_log, release_dir, gpus,
                         signing_key_file)
