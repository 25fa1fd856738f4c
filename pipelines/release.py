"""The release pipeline:
validate_dataset -> [gate passed] -> build_base_model -> train_zero3 -> evaluate_llm
-> [blessed] -> verify_watermark -> [verified] -> triton_canary_deploy.

The demo base model is built from the clean data; a production pipeline imports its
base model instead.
"""
from kfp import dsl

from kfp_llmops.components.data_validation.component import validate_dataset
from kfp_llmops.components.deploy.component import triton_canary_deploy
from kfp_llmops.components.evaluation.component import evaluate_llm
from kfp_llmops.components.training.component import build_base_model, train_zero3
from kfp_llmops.components.watermark.component import verify_watermark


@dsl.pipeline(name="llmops-release",
              description="Validate SFT data, train with DeepSpeed ZeRO-3 and Merkle-verified checkpoints, "
                          "evaluate, verify the watermark, and roll out to Triton as a canary.")
def release_pipeline(dataset_uri: str, eval_dataset_uri: str, data_config: str = "", pii_policy: str = "balanced",
                     base_model_size: str = "demo", train_config: str = "", checkpoint_dir: str = "",
                     eval_config: str = "", watermark_config: str = "", watermark_key_file: str = "",
                     deploy_config: str = "", serving_state_dir: str = ""):
    raw = dsl.importer(artifact_uri=dataset_uri, artifact_class=dsl.Dataset, reimport=False)
    raw.set_display_name("import-dataset")
    eval_set = dsl.importer(artifact_uri=eval_dataset_uri, artifact_class=dsl.Dataset, reimport=False)
    eval_set.set_display_name("import-eval-dataset")
    validated = validate_dataset(raw=raw.output, config=data_config, policy=pii_policy)
    validated.set_display_name("validate-dataset").set_caching_options(False)
    with dsl.If(validated.outputs["Output"] == True, name="data-gate-passed"):  # noqa: E712
        base = build_base_model(dataset=validated.outputs["clean"], size=base_model_size)
        base.set_display_name("build-base-model").set_caching_options(False)
        trained = train_zero3(dataset=validated.outputs["clean"], base_model=base.outputs["base_model"],
                              config=train_config, checkpoint_dir=checkpoint_dir)
        trained.set_display_name("train-zero3").set_caching_options(False).set_retry(num_retries=2)
        evaluated = evaluate_llm(model=trained.outputs["model"], eval_dataset=eval_set.output, config=eval_config)
        evaluated.set_display_name("evaluate-llm").set_caching_options(False)
        with dsl.If(evaluated.outputs["Output"] == True, name="blessed"):  # noqa: E712
            marked = verify_watermark(model=trained.outputs["model"], eval_dataset=eval_set.output,
                                      config=watermark_config, key_file=watermark_key_file)
            marked.set_display_name("verify-watermark").set_caching_options(False)
            with dsl.If(marked.outputs["Output"] == True, name="verified"):  # noqa: E712
                deployed = triton_canary_deploy(model=trained.outputs["model"], blessing=evaluated.outputs["blessing"],
                                                config=deploy_config, key_file=watermark_key_file,
                                                state_dir=serving_state_dir)
                deployed.set_display_name("triton-canary-deploy").set_caching_options(False)


PIPELINES = {"release": release_pipeline}
