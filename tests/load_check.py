"""One rank of the partitioned-load test (run by torchrun): each model folder given is
loaded the way train_zero3 loads it, every parameter is gathered and compared with what
`from_pretrained` reads (in fp32), and the rank's own share of the weights is counted.
Writes one JSON line per folder to `<out>.rank<r>`."""

import json
import os
import sys


def main(out: str, *folders: str) -> None:
    import deepspeed
    import torch
    from transformers import AutoModelForCausalLM

    from kfp_llmops.components.common.errors import LlmopsError
    from kfp_llmops.components.training import partitioned_load
    from kfp_llmops.components.training.config import TrainConfig

    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    ds_config = TrainConfig(world_size=torch.distributed.get_world_size(), micro_batch=1).deepspeed_config()
    with open(f"{out}.rank{rank}", "w") as report:
        for folder in folders:
            try:
                model = partitioned_load.load(AutoModelForCausalLM, folder, ds_config, rank)
            except LlmopsError as exc:
                report.write(json.dumps({"folder": folder, "error": str(exc)}) + "\n")
                continue
            reference = dict(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).named_parameters())
            mismatched, own, total, names = [], 0, 0, []
            for name, param in model.named_parameters():
                names.append(name)
                own += param.ds_tensor.numel()
                total += param.ds_numel
                with deepspeed.zero.GatheredParameters([param]):
                    if (
                        name not in reference
                        or param.dtype != torch.float32
                        or not torch.equal(param.data, reference[name].data)
                    ):
                        mismatched.append(name)
            report.write(
                json.dumps(
                    {
                        "folder": folder,
                        "mismatched": mismatched,
                        "own": own,
                        "total": total,
                        "names": sorted(names),
                        "reference": sorted(reference),
                    }
                )
                + "\n"
            )


if __name__ == "__main__":
    main(*sys.argv[1:])
    os._exit(0)
