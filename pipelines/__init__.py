"""kfp-llmops pipelines: the release DAG, the `llmops` CLI, compile and local runs."""
