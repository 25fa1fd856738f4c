"""The stage table's names (`records.STAGES`: `common` names the stages, never imports
them) resolved to the objects they name, for the layers above the stages."""

from __future__ import annotations

import importlib

from kfp_llmops.components.common import records

ALL = (*records.STAGES, records.RELEASE_STAGE)
BY_NAME = {s.name: s for s in ALL}


def entry(stage: records.Stage):
    """The stage's KFP entry (`run_component`, keyword-only)."""
    return getattr(importlib.import_module(f"kfp_llmops.components.{stage.package}"), stage.entry)


def config_model(stage: records.Stage):
    """The stage's one config model, or None for a stage without a config."""
    if not stage.config:
        return None
    return getattr(importlib.import_module(f"kfp_llmops.components.{stage.package}.config"), stage.config)
