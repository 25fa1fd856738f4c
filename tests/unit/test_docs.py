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


def _cli_commands(group, prefix="llmops"):
    import click

    for name, cmd in group.commands.items():
        yield f"{prefix} {name}"
        if isinstance(cmd, click.Group):
            yield from _cli_commands(cmd, f"{prefix} {name}")


def test_readme_and_cli_name_the_same_commands():
    """Every command the README shows exists, and every command the CLI has is shown."""
    import re

    from kfp_llmops.pipelines.cli.main import cli

    text = read("README.md")
    commands = set(_cli_commands(cli))
    shown = {m.group(0) for m in re.finditer(r"(?<![\w-])llmops [a-z][a-z-]*(?: [a-z][a-z-]*)?", text)}
    unknown = {s for s in shown if s not in commands and s.rsplit(" ", 1)[0] not in commands}
    assert not unknown, f"README shows commands the CLI does not have: {sorted(unknown)}"
    groups = {c.rsplit(" ", 1)[0] for c in commands if c.count(" ") == 2}
    undocumented = {c for c in commands if c not in groups and c not in shown}
    assert not undocumented, f"CLI commands the README never shows: {sorted(undocumented)}"


def test_readme_make_targets_exist():
    import re

    targets = set(re.findall(r"^([a-z][a-z-]*):", read("Makefile"), re.M))
    shown = set(re.findall(r"`make ([a-z][a-z-]*)", read("README.md")))
    assert {"demo", "test"} <= shown and shown <= targets, shown - targets


def test_deploy_readme_matches_the_cli_and_config_defaults():
    from kfp_llmops.components.deploy import DeployConfig
    from kfp_llmops.pipelines.cli.main import deploy

    text = read("components", "deploy", "README.md")
    for name in deploy.commands:
        assert f"llmops deploy {name}" in text, name
    cfg = DeployConfig()
    assert f"steps: {cfg.steps}, interval_s: {cfg.interval_s:g}, threshold: {cfg.threshold}" in text
    s = cfg.sla
    assert (
        f"sla: {{max_error_rate: {s.max_error_rate}, max_p99_ms: {s.max_p99_ms:g}, error_rate_tolerance: "
        f"{s.error_rate_tolerance},\nlatency_tolerance: {s.latency_tolerance}, min_requests: {s.min_requests}, "
        f"max_ttft_ms: {s.max_ttft_ms:g}, max_itl_ms: {s.max_itl_ms:g},\ntoken_latency_slack_ms: "
        f"{s.token_latency_slack_ms:g}}}"
    ) in text
