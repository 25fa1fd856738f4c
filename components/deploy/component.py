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
    promote or roll back. The watermark is served with the parameters `watermarked`
    (verify_watermark's output) records. Returns `promoted` or `rolled_back`; fails on rollback unless
    `fail_on_rollback: false`. `state_dir` (local target) holds the promoted repositories.
    `default_target` applies when the config names no `target` (the cluster forms: kserve).
    `public_key_file`: the model must be signed by its pair; the repository is signed with
    `signing_key_file` and verified before traffic moves (both from a mounted Secret).
    """
    from kfp_llmops.components.deploy import run_component

    return run_component(model, blessing, config, key_file, state_dir, repository, record, metrics, report,
                         release_dir, default_target, watermarked, signing_key_file, public_key_file)
