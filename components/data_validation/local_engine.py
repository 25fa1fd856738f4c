"""The single-process engine (`engines.validate` chooses it): every input file streamed
through one validator into one pair of outputs, then the gate.
"""

from __future__ import annotations

import time

from .blocks import Validator
from .config import DataValidationConfig
from .drift import DataStats
from .gate import finish
from .outputs import OutputPaths, Outputs, ValidationResult
from .reader import input_files, open_input
from .stream import long_lived_frozen, stream


def validate_local(
    input_path: str,
    outputs: OutputPaths,
    config: DataValidationConfig,
    reference_stats: str | None = None,
    show_progress: bool = True,
) -> ValidationResult:
    """The single-process engine (`engines.validate` chooses): validate `input_path` into
    `outputs`; never raises for bad rows, only for unusable input (InputError)."""
    inputs = input_files(input_path)
    compressed = False
    for path in inputs.files:  # every file refused or accepted before any work
        probe = open_input(path)
        probe.close()
        compressed |= probe.compressed
    reference = DataStats.load(reference_stats) if reference_stats else None
    validator = Validator(config, reference)
    out = Outputs(outputs, config.chunk_size)
    started = time.perf_counter()
    rows_in = rows_out = 0
    try:
        with out, long_lived_frozen():
            for path in inputs.files:
                if inputs.folder:
                    validator.lines.begin(inputs.name(path), rows_in + 1)
                src = open_input(path)
                try:
                    n_in, n_out = stream(
                        src, validator, out.clean, out.quarantine, config, show_progress, first_line=rows_in + 1
                    )
                finally:
                    src.close()
                rows_in, rows_out = rows_in + n_in, rows_out + n_out
    finally:
        validator.close()
    root = out.commit()
    elapsed = time.perf_counter() - started
    return finish(validator, config, inputs, compressed, outputs, rows_in, rows_out, root, out.clean.bytes, elapsed)
