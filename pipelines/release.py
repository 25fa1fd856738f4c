"""The release pipeline, composed of the stages that exist today: validate_dataset.

Later stages (train_zero3, evaluate_llm, verify_watermark, triton_canary_deploy) attach
under the validation gate.
"""
from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Markdown, Metrics

from kfp_llmops.components.data_validation.component import validate_dataset


@dsl.pipeline(name="llmops-release",
              description="Validate SFT data (schema, PII, dedup, drift) and fingerprint it.")
def release_pipeline(dataset_uri: str, data_config: str = "", pii_policy: str = "balanced") -> NamedTuple(
        "ReleaseOutputs", [("clean", Dataset), ("report", Markdown), ("metrics", Metrics), ("passed", bool)]):
    raw = dsl.importer(artifact_uri=dataset_uri, artifact_class=dsl.Dataset, reimport=False)
    raw.set_display_name("import-dataset")
    validated = validate_dataset(raw=raw.output, config=data_config, policy=pii_policy)
    validated.set_display_name("validate-dataset").set_caching_options(False)
    Outputs = NamedTuple("ReleaseOutputs", [("clean", Dataset), ("report", Markdown),
                                            ("metrics", Metrics), ("passed", bool)])
    return Outputs(clean=validated.outputs["clean"], report=validated.outputs["report"],
                   metrics=validated.outputs["metrics"], passed=validated.outputs["Output"])


PIPELINES = {"release": release_pipeline}
