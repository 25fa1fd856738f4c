"""Progress bars for long work: live on a terminal, a line every 15 s in pod logs."""

from __future__ import annotations

import os
import sys

from tqdm import tqdm


def progress(total: int | None, desc: str, unit: str = "B", enabled: bool = True) -> tqdm:
    tty = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        unit_divisor=1024 if unit == "B" else 1000,
        file=sys.stderr,
        mininterval=0.25 if tty else 15.0,
        dynamic_ncols=True,
        leave=True,
        delay=2.0,
        disable=not enabled or os.environ.get("LLMOPS_NO_PROGRESS") == "1",
    )
