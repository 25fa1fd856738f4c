"""engine: ray: the sharded passes (sharded.py) as Ray tasks.

With no address, the stage starts a local Ray with `ray.workers` CPUs and stops it at
the end (the embedded form); with `ray.address` or RAY_ADDRESS it joins that cluster.
A task whose worker dies is run again (Ray's task retries): every pass is a pure
function of its shard or partition, so a retry gives the same bytes.
"""

from __future__ import annotations

import os
import sys

from . import sharded
from .config import DataValidationConfig
from .reader import input_files

TASK_RETRIES = 3


def validate_on_ray(
    input_path: str, outputs, config: DataValidationConfig, reference_stats: str | None, show_progress: bool = True
):
    import ray

    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        else:
            ray.init(num_cpus=config.ray.workers, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    remote = {}

    def submit(fn, *args, num_returns: int = 1):
        key = (fn.__name__, num_returns)
        if key not in remote:
            remote[key] = ray.remote(fn).options(num_returns=num_returns, max_retries=TASK_RETRIES)
        return remote[key].remote(*args)

    try:
        # Shards no larger than shard_mb, and at least four per worker so none idles.
        workers = int(ray.cluster_resources().get("CPU", config.ray.workers))
        if show_progress:
            nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
            print(
                f"[validate] Ray {'at ' + address if address else 'started here'}: on {nodes} node(s), "
                f"{workers} CPU(s)",
                file=sys.stderr,
                flush=True,
            )
        size = input_files(input_path).size
        shard_bytes = max(1 << 20, min(config.ray.shard_mb << 20, size // (4 * workers) + 1))
        return sharded.run(
            input_path,
            outputs,
            config,
            reference_stats,
            submit,
            ray.get,
            shard_bytes=shard_bytes,
            partitions=config.ray.partitions or workers,
            log=(lambda message: print(message, file=sys.stderr, flush=True))
            if show_progress
            else (lambda message: None),
        )
    finally:
        if started_here:
            ray.shutdown()
