"""The `llmops` command line. Every subcommand calls the same function as its KFP
component; errors are one line and an exit code, never a traceback."""

from __future__ import annotations

import os
import sys

import click

from kfp_llmops.components.common.errors import LlmopsError

from . import data, deploy, evaluate, images, model, release, train, watermark


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kfp-llmops", prog_name="llmops")
def cli() -> None:
    """kfp-llmops: release an LLM through verifiable Kubeflow Pipelines stages."""


for _command in (
    data.data,
    train.base_model_cmd,
    train.train_cmd,
    train.checkpoint,
    model.model,
    evaluate.eval_cmd,
    evaluate.bertscore_baseline_cmd,
    watermark.watermark,
    deploy.deploy,
    release.lineage,
    release.stage,
    release.compile_cmd,
    release.submit_cmd,
    release.run_cmd,
    images.images_group,
):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="llmops", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except LlmopsError as exc:
        click.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        from kfp_llmops.components.common.errors import environment_problem

        if os.environ.get("LLMOPS_DEBUG") == "1":
            raise
        problem = environment_problem(exc)
        if problem is not None:  # a full disk is the machine's problem, not an internal error
            click.echo(f"error: {problem}", err=True)
            return problem.exit_code
        click.echo(f"internal error: {type(exc).__name__}: {exc} (LLMOPS_DEBUG=1 shows the traceback)", err=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
