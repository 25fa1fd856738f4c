"""Docs that must match the code."""

import os
import re

from kfp_llmops.components.data_validation import pii
from kfp_llmops.components.data_validation.schema import REASONS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def test_readme_policy_table_is_generated_from_the_policies():
    assert pii.policy_table() in read("docs", "data-validation.md")


def test_component_readme_lists_every_reason_code():
    text = read("docs", "data-validation.md")
    for reason in REASONS:
        assert f"`{reason}`" in text, reason


def _cli_commands(group, prefix="llmops"):
    import click

    for name, cmd in group.commands.items():
        yield f"{prefix} {name}"
        if isinstance(cmd, click.Group):
            yield from _cli_commands(cmd, f"{prefix} {name}")


def test_readme_and_cli_name_the_same_commands():
    """Every command the README and the docs show exists, and every command the CLI has is shown."""
    import re

    from kfp_llmops.pipelines.cli.main import cli

    text = "".join(read(page) for page in _pages())
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


def test_deploy_page_names_every_command_and_links_its_config_reference():
    from kfp_llmops.pipelines.cli.main import cli

    text = read("docs", "deploy.md")
    for name in cli.commands["deploy"].commands:
        assert f"llmops deploy {name}" in text, name
    assert "reference.md#triton_canary_deploy-deployconfig" in text


def test_the_config_and_gate_reference_is_generated_from_the_models(tmp_path, monkeypatch):
    """docs/reference.md is what the models say; a default changed without regenerating
    makes `llmops compile --check` fail."""
    from pydantic import Field

    from kfp_llmops.components.data_validation.config import DataValidationConfig, GateConfig
    from kfp_llmops.pipelines import reference

    assert reference.write(check=True) == []
    text = read("docs", "reference.md")
    assert "| validate_dataset | `gate.max_reject_rate` | measured ≤ bound | `0.05` |" in text
    assert (
        "| evaluate_llm | `gate.change.perplexity.relative` | (candidate - baseline) / baseline ≤ bound | `0.1`" in text
    )

    class Stricter(GateConfig):
        max_reject_rate: float = Field(0.01, ge=0.0, le=1.0, json_schema_extra={"gate": "<="})

    class Changed(DataValidationConfig):
        gate: Stricter = Field(default_factory=Stricter)

    configs = reference.stage_configs()
    monkeypatch.setattr(reference, "stage_configs", lambda: [("validate_dataset", Changed)] + configs[1:])
    assert reference.write(check=True) == ["docs/reference.md"]
    reference.write(str(tmp_path))
    assert "`gate.max_reject_rate` | measured ≤ bound | `0.01` |" in (tmp_path / "reference.md").read_text()


def _pages() -> list[str]:
    import glob

    return ["README.md"] + sorted(
        glob.glob("components/*/README.md", root_dir=ROOT) + glob.glob("docs/*.md", root_dir=ROOT)
    )


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for page in _pages():
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", read(page)):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not os.path.exists(os.path.join(ROOT, os.path.dirname(page), target)):
                broken.append(f"{page}: {target}")
    assert not broken, broken


def test_the_readme_is_read_in_ten_minutes_and_the_rest_lives_in_docs():
    text = read("README.md")
    assert len(text.splitlines()) <= 200
    for page in _pages()[1:]:
        if page.startswith("docs/"):
            assert f"]({page})" in text, f"README does not lead to {page}"
