"""KFP interface of the release record, the release pipeline's exit handler."""
from kfp import dsl
from kfp.dsl import Artifact, Markdown, Output

from kfp_llmops.components import images


@dsl.component(base_image=images.BASE, install_kfp_package=False)
def write_release_record(status: dsl.PipelineTaskFinalStatus, record: Output[Artifact], report: Output[Markdown],
                         provenance: Output[Artifact], release_dir: str = "", signing_key_file: str = "",
                         pipeline_spec_sha256: str = "") -> str:
    """Runs whatever happened: collects every stage's lineage note from `release_dir`
    into record.json and record.md, and, when a model was produced, an in-toto SLSA
    provenance statement signed (DSSE) with `signing_key_file` (a mounted Secret). Check
    either with `llmops lineage verify`."""
    from kfp_llmops.components.release import run_component

    return run_component(status, release_dir, record, report, provenance, signing_key_file, pipeline_spec_sha256)
