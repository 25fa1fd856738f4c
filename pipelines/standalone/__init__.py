"""The standalone stage runner (`runner.py`, `llmops stage run`): one stage at a time over a
shared work folder, what the Argo WorkflowTemplate's pods run."""
