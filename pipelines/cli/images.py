"""The stage images: build, check, push."""

from __future__ import annotations

import os

import click


@click.group("images")
def images_group() -> None:
    """Build the stage images, load them into dockerd, push them to your registry."""


@images_group.command("build")
@click.option(
    "--base-source",
    type=click.Choice(["auto", "pinned", "debian"]),
    default="auto",
    show_default=True,
    help="pinned: the python:3.11-slim digest (needs a registry); debian: a Python 3.11 base "
    "bootstrapped from Debian packages; auto: pinned when a registry answers.",
)
@click.option(
    "--stage",
    "stages",
    multiple=True,
    type=click.Choice(["base", "data", "train", "eval", "deploy"]),
    help="Only these images (repeatable; default all).",
)
@click.option("--load/--no-load", default=True, show_default=True, help="Also load them into dockerd.")
def images_build(base_source, stages, load) -> None:
    """Build (or reuse, when built from the same sources) the stage images with podman."""
    from ..containers import build, docker_ready, load_into_docker

    report = build(base_source, list(stages) or None)
    for r in report.values():
        how = "reused" if r["reused"] else f"built in {r['seconds']:.0f} s"
        click.echo(f"{r['image']:<40} {r['bytes'] / 1e6:7.0f} MB  {how}")
    if load:
        docker_ready(start=True)
        load_into_docker(list(stages) or None)
        click.echo("loaded into dockerd")


@images_group.command("check")
def images_check() -> None:
    """Exit 0 when dockerd has every stage image, built from this tree."""
    from ..containers import check_runnable, docker_ready

    docker_ready()
    check_runnable()
    click.echo("every stage image is in dockerd and built from this tree")


@images_group.command("push")
@click.option("--registry", required=True, envvar="LLMOPS_REGISTRY", help="Target registry (or $LLMOPS_REGISTRY).")
@click.option("--tag", envvar="LLMOPS_IMAGE_TAG", help="Tag (default: the package version).")
@click.option(
    "--digests",
    "digests_file",
    type=click.Path(dir_okay=False),
    default="build/images/digests.json",
    show_default=True,
    help="Where to write {stage: digest} for `llmops compile --digests`.",
)
def images_push(registry, tag, digests_file) -> None:
    """Tag and push every stage image; write their digests."""
    from ..containers import push

    os.makedirs(os.path.dirname(os.path.abspath(digests_file)), exist_ok=True)
    push(registry, tag, digests_file)
    click.echo(f"digests: {digests_file} (llmops compile --registry {registry} --digests {digests_file} --out DIR)")
