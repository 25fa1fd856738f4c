"""The demo: the bundled dataset (`demo_data.py`) and the release DAG run locally through
kfp.local (`local_run.py`, `llmops run`, `make demo`)."""
