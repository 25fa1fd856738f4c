"""KFP interface of the release record, the release pipeline's exit handler."""
from typing import Optional

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Output

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


# Small uncached tasks around the stages KFP may cache (validate_dataset, evaluate_llm).
# KFP's cache key holds input parameter values and artifact *names*; an imported artifact
# keeps its name when the bytes at its URI change, and the release volume is read and
# written outside any key. These tasks bring what a cached stage depends on into its key
# (a root, a pinned baseline) and carry its lineage note out to the release folder.

@dsl.component(base_image=images.BASE, install_kfp_package=False)
def fingerprint_dataset(dataset: Input[Dataset]) -> str:
    """The dataset file's Merkle root (BLAKE3), which a cached stage's key then holds."""
    from kfp_llmops.components.common import integrity

    return integrity.seal("dataset", dataset.path)


@dsl.component(base_image=images.BASE, install_kfp_package=False)
def pin_baseline(release_dir: str = "", baseline_release: str = "auto") -> str:
    """The promoted release now, verified and pinned as `<record.json>#sha256=<hex>` (or
    "none"): what the stages compare with, fixed for the whole run and in their cache keys."""
    from kfp_llmops.components.common import baseline

    return baseline.pin(release_dir, baseline_release)


@dsl.component(base_image=images.BASE, install_kfp_package=False)
def file_note(note: Input[Artifact], release_dir: str = "", stats: Optional[Input[Artifact]] = None) -> str:
    """A cached stage's lineage note (and the data statistics it names) into the release
    folder, whether the stage ran now or its result came from the cache."""
    from kfp_llmops.components.common import records

    if not release_dir:
        return ""
    return records.file_note(release_dir, note.path, stats.path if stats is not None else None).stage
