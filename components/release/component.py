"""KFP interface of the release record, the release pipeline's exit handler."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Output

from kfp_llmops.components import images


@dsl.component(base_image=images.BASE, install_kfp_package=False)
def write_release_record(
    status: dsl.PipelineTaskFinalStatus,
    record: Output[Artifact],
    report: Output[Markdown],
    provenance: Output[Artifact],
    release_dir: str = "",
    signing_key_file: str = "",
    pipeline_spec_sha256: str = "",
) -> str:
    """Runs whatever happened: collects every stage's lineage note from `release_dir`
    into record.json and record.md, and, when a model was produced, an in-toto SLSA
    provenance statement signed (DSSE). Check either with `llmops lineage verify`.

    Args:
        status: The pipeline's final status (KFP sets it for an exit handler).
        record: The release record: every stage's inputs, outputs and roots (JSON).
        report: The release record for people (Markdown).
        provenance: The signed in-toto SLSA provenance statement (DSSE), when a model was produced.
        release_dir: Folder of the lineage notes and the release record.
        signing_key_file: PEM private key that signs the provenance (a mounted Secret).
        pipeline_spec_sha256: SHA-256 of the compiled pipeline spec, recorded in the provenance.
    """
    from kfp_llmops.components.common.contract import said_in_one_line
    from kfp_llmops.components.release import run_component

    with said_in_one_line():
        return run_component(
            status=status,
            release_dir=release_dir,
            record=record,
            report=report,
            provenance=provenance,
            signing_key_file=signing_key_file,
            pipeline_spec_sha256=pipeline_spec_sha256,
        ).value


# Small uncached tasks around the stages KFP may cache (validate_dataset, evaluate_llm).
# KFP's cache key holds input parameter values and artifact *names*; an imported artifact
# keeps its name when the bytes at its URI change, and the release volume is read and
# written outside any key. These tasks bring what a cached stage depends on into its key
# (a root, a pinned baseline) and carry its lineage note out to the release folder.


@dsl.component(base_image=images.BASE, install_kfp_package=False)
def fingerprint_dataset(dataset: Input[Dataset]) -> str:
    """The dataset's Merkle root (BLAKE3), which a cached stage's key then holds.

    Args:
        dataset: A dataset file, or a folder of them (every file hashed under its name).
    """
    from kfp_llmops.components.common import integrity
    from kfp_llmops.components.common.contract import said_in_one_line

    with said_in_one_line():
        return integrity.seal("dataset", dataset.path)


@dsl.component(base_image=images.BASE, install_kfp_package=False)
def pin_baseline(release_dir: str = "", baseline_release: str = "auto") -> str:
    """The promoted release now, verified and pinned as `<record.json>#sha256=<hex>` (or
    "none"): what the stages compare with, fixed for the whole run and in their cache keys.

    Args:
        release_dir: Folder of the release records (promoted.json beside them).
        baseline_release: auto (the last promoted release), none, or the path of a promoted.json.
    """
    from kfp_llmops.components.common import baseline
    from kfp_llmops.components.common.contract import said_in_one_line

    with said_in_one_line():
        return baseline.pin(release_dir, baseline_release)


@dsl.component(base_image=images.BASE, install_kfp_package=False)
def file_note(note: Input[Artifact], release_dir: str = "", stats: Input[Artifact] | None = None) -> str:
    """A cached stage's lineage note (and the data statistics it names) into the release
    folder, whether the stage ran now or its result came from the cache.

    Args:
        note: The stage's lineage note.
        release_dir: Folder of the release record and lineage notes.
        stats: The data statistics the note names (validate_dataset's), filed beside it.
    """
    from kfp_llmops.components.common import records
    from kfp_llmops.components.common.contract import said_in_one_line

    if not release_dir:
        return ""
    with said_in_one_line():
        return records.file_note(release_dir, note.path, stats.path if stats is not None else None).stage
