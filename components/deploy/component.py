"""KFP interface of triton_canary_deploy. The logic lives in this package's other modules."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

from kfp_llmops.components import images


@dsl.component(base_image=images.DEPLOY, install_kfp_package=False)
def triton_canary_deploy(
    model: Input[Model],
    blessing: Input[Artifact],
    watermarked: Input[Dataset],
    repository: Output[Model],
    record: Output[Artifact],
    metrics: Output[Metrics],
    report: Output[HTML],
    config: str = "",
    default_target: str = "local",
    key_file: str = "",
    state_dir: str = "",
    release_dir: str = "",
    signing_key_file: str = "",
    public_key_file: str = "",
) -> str:
    """Build the Triton repository from exactly the blessed model, roll it out as a canary
    (steps, SLA analysis against stable, smoke tests with watermark detection), and
    promote or roll back. Returns `promoted` or `rolled_back`; fails on rollback unless
    `fail_on_rollback: false`.

    Args:
        model: The trained model; deployed only if its root is the blessed one.
        blessing: evaluate_llm's blessing: the root it blessed and the decoding it judged.
        watermarked: verify_watermark's output: the watermark parameters the model is served with.
        repository: The Triton model repository built from the blessed model, sealed and signed.
        record: The rollout record: every interval's figures, the decision and why.
        metrics: The rollout's summary figures.
        report: The rollout report with its traffic and latency timeline (HTML).
        config: Stage config as YAML or one-line JSON; empty for the defaults.
        default_target: The target when the config names none: local, kserve or gateway.
        key_file: File with the watermark key (a mounted Secret); else $LLMOPS_WATERMARK_KEY.
        state_dir: Folder of the promoted repositories (local target).
        release_dir: Folder of the release record and lineage notes.
        signing_key_file: PEM private key that signs the repository (a mounted Secret).
        public_key_file: PEM public key: the model and repository must be signed by its pair.
    """
    from kfp_llmops.components.common.contract import said_in_one_line
    from kfp_llmops.components.deploy import run_component

    with said_in_one_line():
        return run_component(
            model=model,
            blessing=blessing,
            config=config,
            key_file=key_file,
            state_dir=state_dir,
            repository=repository,
            record=record,
            metrics=metrics,
            report=report,
            release_dir=release_dir,
            default_target=default_target,
            watermarked=watermarked,
            signing_key_file=signing_key_file,
            public_key_file=public_key_file,
        ).value
