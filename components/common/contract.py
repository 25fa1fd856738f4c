"""The one contract every stage's KFP entry (`run_component`) keeps: keyword-only
arguments named as the component's inputs, artifacts through the small protocol below
(a KFP artifact and the Argo runner's file artifact both satisfy it), and one result
whose failure is raised one way, whatever the stage."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import GateFailed, LlmopsError, environment_problem


class Artifact(Protocol):
    """Where an artifact's bytes are, and the metadata that travels with it (roots)."""

    path: str
    metadata: dict[str, Any]


class Metrics(Artifact, Protocol):
    """An artifact whose scalars the Kubeflow UI lists."""

    def log_metric(self, metric: str, value: float) -> None: ...


@dataclass
class StageResult:
    """What a stage produced: did its gate pass, why not (one line), the checks it was
    judged by, its scalar metrics, and the value its KFP task returns (`result`)."""

    stage: str
    passed: bool
    value: bool | str
    reason: str = ""
    checks: list[dict] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def raise_unless_passed(result: StageResult) -> None:
    """A failed gate as GateFailed (exit 1 on the CLI, a failed task in a pipeline)."""
    if not result.passed:
        raise GateFailed(result.reason or f"{result.stage}: gate failed")


@contextmanager
def said_in_one_line() -> Iterator[None]:
    """Around a KFP task's body: bad input, a failed gate or a full disk ends the task as
    it ends a CLI command, with one line on stderr and its exit code (2, 1, 2), not a
    traceback; anything else is a bug, and keeps its traceback."""
    try:
        yield
    except LlmopsError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(exc.exit_code) from None
    except Exception as exc:
        problem = environment_problem(exc)
        if problem is None:
            raise
        print(f"error: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(problem.exit_code) from None
