"""Options, choices and readings several commands share."""

from __future__ import annotations

import json

import click

from kfp_llmops.components.common.errors import LlmopsError

POLICIES = click.Choice(["strict", "balanced", "permissive"])


def config_option(help: str, **kwargs):
    """`--config` (its value as `config_path`): a stage config YAML file."""
    return click.option("--config", "config_path", type=click.Path(dir_okay=False, **kwargs), help=help)


def watermark_key_option(help: str = "Watermark key file (else $LLMOPS_WATERMARK_KEY or the mounted Secret)."):
    return click.option("--key-file", help=help)


def watermark_record_option():
    """`--watermark` (as `watermark_record`): the verified watermark parameters a repository is built with."""
    return click.option(
        "--watermark",
        "watermark_record",
        type=click.Path(dir_okay=False),
        help="metrics.json of `llmops watermark verify`: serve with the parameters it verified "
        "(required unless the config sets watermark.enabled: false).",
    )


def state_option(help: str = "Local deployment state."):
    return click.option("--state", "state_dir", default="runs/serving", show_default=True, help=help)


def blessed(blessing: str | None, blessed_root: str | None):
    """(the blessed root, the decoding it was judged under, the production model it was
    judged against) from blessing.json, or the root given alone (then evaluation's default
    decoding, and no comparison known)."""
    from kfp_llmops.components.common.decoding import Decoding

    if blessing:
        try:
            with open(blessing, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            raise LlmopsError(f"{blessing}: unreadable blessing: {exc}") from None
        if not data.get("blessed"):
            raise LlmopsError(f"{blessing}: the model was not blessed; refusing to deploy")
        if blessed_root and blessed_root != data.get("model_root"):
            raise LlmopsError(f"--blessed-root {blessed_root} disagrees with {blessing}")
        return data.get("model_root"), Decoding.from_record(data, blessing), data.get("compared_with")
    return blessed_root, Decoding(), None
