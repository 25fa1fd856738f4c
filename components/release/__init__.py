"""The release record (written by the pipeline's exit handler, whatever happened) and
lineage verification: does what serves traffic descend from the validated dataset?"""

from __future__ import annotations

import os
import shutil
from typing import Any

from kfp_llmops.components.common.contract import Artifact, StageResult


def run_component(
    *,
    status: Any,
    release_dir: str,
    record: Artifact,
    report: Artifact,
    provenance: Artifact | None = None,
    signing_key_file: str = "",
    pipeline_spec_sha256: str = "",
) -> StageResult:
    """KFP exit-handler entry: the record of this run, whatever happened in it, and its
    provenance statement (signed with the key given) when it produced a model."""
    from kfp_llmops.components.common import signing

    from . import provenance as slsa
    from .record import write

    fields = (
        status
        if isinstance(status, dict)
        else {
            "state": getattr(status, "state", None),
            "pipeline_job_resource_name": getattr(status, "pipeline_job_resource_name", None),
            "pipeline_task_name": getattr(status, "pipeline_task_name", None),
            "error": getattr(status, "error_message", None),
        }
    )
    folder = release_dir or os.path.dirname(record.path)
    result = write(release_dir, fields, os.path.join(folder, "record.json"), os.path.join(folder, "record.md"))
    shutil.copyfile(os.path.join(folder, "record.json"), record.path)
    shutil.copyfile(os.path.join(folder, "record.md"), report.path)
    record.metadata.update(
        {"status": result["status"], "decision": result["decision"] or "none", "stages": sorted(result["stages"])}
    )
    if release_dir and result["decision"] == "promoted":
        from kfp_llmops.components.common import baseline
        from kfp_llmops.components.common.errors import InputError

        try:
            record.metadata["promoted_pointer"] = baseline.promote(
                release_dir, os.path.join(folder, "record.json"), result
            )
        except InputError as exc:  # the record stands; the pointer stays with the release it names
            print(f"release record: {exc}")
            record.metadata["promoted_pointer"] = f"not moved: {exc}"
    if provenance is not None and "train_zero3" in result["stages"]:
        attested = slsa.write(
            result,
            folder,
            os.path.join(folder, slsa.FILE_NAME),
            signing.key_file(signing_key_file),
            pipeline_spec_sha256,
        )
        shutil.copyfile(attested["path"], provenance.path)
        provenance.metadata.update(
            {"signed": attested["signed"], "subjects": attested["subjects"], "predicateType": slsa.PREDICATE_TYPE}
        )
    return StageResult("release_record", True, result["status"])
