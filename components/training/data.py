"""Training data: the clean dataset verified against its Merkle root before it is read,
tokenized into fixed-length sequences, and a sampler whose position is part of every
checkpoint, so a resumed run sees exactly the batches an uninterrupted one would."""
from __future__ import annotations

import json

import numpy as np

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.generation import encode_example


def read_pairs(path: str) -> list[tuple[str, str]]:
    """(prompt, response) pairs; `{"text"}` records train on the whole text."""
    pairs = []
    with open(path, encoding="utf-8") as handle:
        for n, line in enumerate(handle, 1):
            try:
                row = json.loads(line)
            except ValueError:
                raise InputError(f"{path}:{n}: not JSON (is this validate_dataset's clean output?)") from None
            if "prompt" in row and "response" in row:
                pairs.append((row["prompt"], row["response"]))
            elif "text" in row:
                pairs.append(("", row["text"]))
            else:
                raise InputError(f"{path}:{n}: record has neither prompt/response nor text")
    if not pairs:
        raise InputError(f"{path}: no training records")
    return pairs


def encode(tokenizer, pairs: list[tuple[str, str]], seq_len: int, mask_prompt: bool) -> dict[str, np.ndarray]:
    """input_ids / labels of shape [N, seq_len]; labels are -100 on padding (and prompts)."""
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    ids = np.full((len(pairs), seq_len), pad, dtype=np.int64)
    labels = np.full((len(pairs), seq_len), -100, dtype=np.int64)
    truncated = 0
    for i, (prompt, response) in enumerate(pairs):
        p, r = encode_example(tokenizer, prompt, response)
        seq = (p + r)[:seq_len]
        truncated += len(p) + len(r) > seq_len
        ids[i, :len(seq)] = seq
        start = min(len(p), seq_len) if mask_prompt else 0
        labels[i, start:len(seq)] = seq[start:]
    return {"input_ids": ids, "labels": labels, "truncated": np.array(truncated)}


class Sampler:
    """Epoch-seeded permutations; the state is (epoch, position in epoch)."""

    def __init__(self, n: int, seed: int, epoch: int = 0, position: int = 0):
        self.n, self.seed, self.epoch, self.position = n, seed, epoch, position
        self._perm = self._permutation(epoch)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)

    def take(self, count: int) -> np.ndarray:
        out = []
        while count:
            if self.position == self.n:
                self.epoch, self.position = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            k = min(count, self.n - self.position)
            out.append(self._perm[self.position:self.position + k])
            self.position += k
            count -= k
        return np.concatenate(out)

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "n": self.n, "seed": self.seed}

    @classmethod
    def from_state(cls, state: dict) -> "Sampler":
        return cls(state["n"], state["seed"], state["epoch"], state["position"])
