"""Where the data stage runs, chosen in one place: in this process (`validate_local`),
as sharded passes on Ray (`ray_engine`), or in a RayJob on KubeRay (`rayjob`, whose pods
run this module's `main`). Every engine writes the same bytes; each imports only the
validator's public names, and nothing below imports this module."""

from __future__ import annotations

import json
import os
import sys

from kfp_llmops.components.common import atomic
from kfp_llmops.components.common.errors import InputError

from .config import DataValidationConfig
from .local_engine import validate_local
from .outputs import OutputPaths, ValidationResult


def validate(
    input_path: str,
    outputs: OutputPaths,
    config: DataValidationConfig,
    reference_stats: str | None = None,
    show_progress: bool = True,
) -> ValidationResult:
    """Validate `input_path` into `outputs` on the engine `config` names; never raises for
    bad rows, only for unusable input (InputError). The gate verdict is in the result."""
    if config.engine == "ray" and config.ray.kuberay.enabled:
        from .rayjob import validate_on_kuberay

        return validate_on_kuberay(input_path, outputs, config, reference_stats)
    if config.engine == "ray":
        from .ray_engine import validate_on_ray

        return validate_on_ray(input_path, outputs, config, reference_stats, show_progress)
    return validate_local(input_path, outputs, config, reference_stats, show_progress)


def main(argv: list[str] | None = None) -> int:
    """A RayJob's entrypoint, on the cluster: validate as the spec `rayjob` wrote says; a
    failed gate is a result (exit 0, the task decides), unusable input one line and exit 2."""
    args = sys.argv[1:] if argv is None else argv
    with open(args[0], encoding="utf-8") as handle:
        spec = json.load(handle)
    try:
        config = DataValidationConfig.model_validate(spec["config"])
        result = validate(spec["input"], OutputPaths.in_dir(spec["out"]), config, spec.get("reference"))
    except (InputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    atomic.write_json(os.path.join(spec["out"], "samples.json"), result.samples)
    print(
        f"[validate] rows_in={result.metrics['rows_in']} rows_out={result.metrics['rows_out']} "
        f"merkle_root={result.metrics['merkle_root']}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
