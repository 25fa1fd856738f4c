"""Docs that must match the code."""
import os

from kfp_llmops.components.data_validation import pii
from kfp_llmops.components.data_validation.validate import REASONS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def test_readme_policy_table_is_generated_from_the_policies():
    assert pii.policy_table() in read("README.md")


def test_component_readme_lists_every_reason_code():
    text = read("components", "data_validation", "README.md")
    for reason in REASONS:
        assert f"`{reason}`" in text, reason


def test_readme_names_the_two_setup_commands():
    text = read("README.md")
    assert "make demo" in text and "make test" in text


def test_deploy_readme_matches_the_cli_and_config_defaults():
    from kfp_llmops.components.deploy import DeployConfig
    from kfp_llmops.pipelines.cli import deploy

    text = read("components", "deploy", "README.md")
    for name in deploy.commands:
        assert f"llmops deploy {name}" in text, name
    cfg = DeployConfig()
    assert f"steps: {cfg.steps}, interval_s: {cfg.interval_s:g}, threshold: {cfg.threshold}" in text
    s = cfg.sla
    assert (f"sla: {{max_error_rate: {s.max_error_rate}, max_p99_ms: {s.max_p99_ms:g}, error_rate_tolerance: "
            f"{s.error_rate_tolerance},\nlatency_tolerance: {s.latency_tolerance}, min_requests: {s.min_requests}}}") in text
