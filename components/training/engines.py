"""Where training runs, chosen in one place: the ranks on this node (`launch.train_here`)
or a Kubeflow Trainer TrainJob across nodes (`trainjob_run`). Both build on `launch`'s
run spec; nothing below imports this module."""

from __future__ import annotations

from .config import TrainConfig
from .launch import RunInputs, resolve_recipe, train_here


def train(clean_path: str, base_model: str, out_dir: str, cfg: TrainConfig, **options) -> dict:
    """Run (or resume) training; returns rank 0's result (loss, throughput, saves, roots).
    `options`: the other `RunInputs` fields. With `multinode.nodes` > 1 a TrainJob runs
    the ranks."""
    run = RunInputs(clean_path, base_model, out_dir, **options)
    cfg = resolve_recipe(cfg, base_model)
    if cfg.multinode.nodes > 1:
        from .trainjob_run import train_multinode

        return train_multinode(run, cfg)
    return train_here(run, cfg)
