"""KFP interfaces of the training stage. The logic lives in this package's other modules."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

from kfp_llmops.components import images


@dsl.component(base_image=images.TRAIN, install_kfp_package=False)
def build_base_model(
    dataset: Input[Dataset],
    base_model: Output[Model],
    size: str = "demo",
    release_dir: str = "",
    base_model_uri: str = "",
    base_model_root: str = "",
) -> str:
    """The base model to fine-tune: the user's, verified against its root, else the demo's
    (a BPE tokenizer trained on the clean data and a small GPT-2-style LM). Returns its
    Merkle root.

    Args:
        dataset: The clean data (the demo model's tokenizer is trained on it).
        base_model: The base model, sealed.
        size: The demo model's size when no base_model_uri is given: demo or tiny.
        release_dir: Folder of the release record and lineage notes.
        base_model_uri: The user's sealed Hugging Face folder (a URI or a path); empty builds the demo model.
        base_model_root: Its Merkle root as `llmops model seal` printed it; required with base_model_uri.
    """
    from kfp_llmops.components.common.contract import said_in_one_line
    from kfp_llmops.components.training import build_base_component

    with said_in_one_line():
        return build_base_component(
            dataset=dataset,
            base_model=base_model,
            size=size,
            release_dir=release_dir,
            base_model_uri=base_model_uri,
            base_model_root=base_model_root,
        ).value


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
    resume_from: Input[Artifact] | None = None,
    gpus: str = "0",
    release_dir: str = "",
    signing_key_file: str = "",
) -> str:
    """DeepSpeed ZeRO-3 training with Merkle-verified checkpoints; returns the model's root.

    Args:
        dataset: The clean data (validate_dataset's), its root checked.
        base_model: The model to fine-tune (build_base_model's), its root checked.
        model: The fine-tuned model, exported as a sealed Hugging Face folder.
        checkpoints: The checkpoints, each Merkle-sealed as written.
        metrics: Loss, tokens and throughput.
        report: The training report with its loss curve (HTML).
        train_log: Every rank's log.
        config: Stage config as YAML or one-line JSON; empty for the defaults.
        checkpoint_dir: Folder that outlives the task (a PVC mount), so a retry resumes from the newest
            intact checkpoint.
        resume_from: An earlier run's checkpoints to resume from (its newest one that verifies).
        gpus: The pod's GPU limit (one rank per GPU); "0" keeps the config's ranks.
        release_dir: Folder of the release record and lineage notes.
        signing_key_file: PEM private key that signs the exported model (model-signing; a mounted Secret).
    """
    from kfp_llmops.components.common.contract import said_in_one_line
    from kfp_llmops.components.training import run_component

    with said_in_one_line():
        return run_component(
            dataset=dataset,
            base_model=base_model,
            config=config,
            resume_from=resume_from,
            checkpoint_dir=checkpoint_dir,
            model=model,
            checkpoints=checkpoints,
            metrics=metrics,
            report=report,
            train_log=train_log,
            release_dir=release_dir,
            gpus=gpus,
            signing_key_file=signing_key_file,
        ).value
