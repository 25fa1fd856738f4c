"""Training data: the clean dataset verified against its Merkle root before it is read,
tokenized into fixed-length sequences, and a sampler whose position is part of every
checkpoint, so a resumed run sees exactly the batches an uninterrupted one would.

With packing, a step's rows are filled with whole examples in the sampler's order (one
more example is taken only if it fits, so the sampler's position is still the state),
and each example attends only to itself: positions restart and a block-diagonal causal
mask keeps it from seeing its neighbours, so its logits are those it has alone."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import numpy as np

from kfp_llmops.components.common import atomic
from kfp_llmops.components.common.conversation import TurnError, record_turns
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.generation import encode_text, encode_turns

Example = list | str  # a conversation's turns, or a plain text


def iter_examples(path: str) -> Iterator[Example]:
    """Each record's conversation (`common.conversation`: messages, prompt/completion,
    prompt/response), or its text for `{"text"}` records, one at a time."""
    with open(path, encoding="utf-8") as handle:
        for n, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise InputError(f"{path}:{n}: not JSON (is this validate_dataset's clean output?)") from None
            if not isinstance(row, dict):
                raise InputError(f"{path}:{n}: expected a JSON object")
            try:
                turns = record_turns(row)
            except TurnError as exc:
                raise InputError(f"{path}:{n}: {exc}") from None
            except KeyError as exc:
                raise InputError(f"{path}:{n}: record has none of {exc.args[0]}") from None
            yield row["text"] if turns is None else turns


def read_examples(path: str) -> list[Example]:
    examples = list(iter_examples(path))
    if not examples:
        raise InputError(f"{path}: no training records")
    return examples


def example_ids(tokenizer, example: Example) -> tuple[list[int], list[bool]]:
    """Token ids of one example and which of them are answers (a text is all answer)."""
    if isinstance(example, str):
        ids = encode_text(tokenizer, example)
        return ids, [True] * len(ids)
    return encode_turns(tokenizer, example)


def _encode_into(
    tokenizer, example: Example, ids: np.ndarray, labels: np.ndarray, mask_prompt: bool
) -> tuple[bool, int]:
    """One example into a row of input_ids / labels (already pad / -100); (cut, length)."""
    seq_len = len(ids)
    full, answer = example_ids(tokenizer, example)
    seq = full[:seq_len]
    ids[: len(seq)] = seq
    if mask_prompt:
        keep = np.array(answer[:seq_len], dtype=bool)
        labels[: len(seq)][keep] = np.asarray(seq, dtype=labels.dtype)[keep]
    else:
        labels[: len(seq)] = seq
    return len(full) > seq_len, len(seq)


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def encode(tokenizer, examples: list[Example], seq_len: int, mask_prompt: bool) -> dict[str, np.ndarray]:
    """input_ids / labels of shape [N, seq_len] in memory; labels are -100 on padding (and
    prompts); lengths [N]. Training streams instead (`tokenize_to_files`)."""
    ids = np.full((len(examples), seq_len), _pad_id(tokenizer), dtype=np.int64)
    labels = np.full((len(examples), seq_len), -100, dtype=np.int64)
    done = [_encode_into(tokenizer, ex, ids[i], labels[i], mask_prompt) for i, ex in enumerate(examples)]
    return {
        "input_ids": ids,
        "labels": labels,
        "truncated": np.array(sum(cut for cut, _ in done)),
        "lengths": np.array([n for _, n in done], dtype=np.int64),
    }


_BLOCK = 1024  # rows encoded between writes


def tokenize_to_files(clean_path: str, tokenizer, seq_len: int, mask_prompt: bool, folder: str) -> dict:
    """Stream the clean data once into `input_ids.npy` / `labels.npy` ([N, seq_len] int32,
    written a block of rows at a time; training maps them) and `lengths.npy` ([N], the
    tokens of each example, for packing), so memory stays flat however
    large the dataset; a folder already complete (its `tokens.json` written last) is
    reused as it is. The caller names the folder by what the tokens depend on (dataset
    root, model, config)."""
    meta_path = os.path.join(folder, "tokens.json")
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as handle:
            return json.load(handle)
    with open(clean_path, encoding="utf-8") as handle:  # the records iter_examples yields; it checks them
        rows = sum(1 for line in handle if line.strip())
    if not rows:
        raise InputError(f"{clean_path}: no training records")
    os.makedirs(folder, exist_ok=True)
    paths = {name: os.path.join(folder, f"{name}.npy") for name in ("input_ids", "labels", "lengths")}
    descr = np.lib.format.dtype_to_descr(np.dtype(np.int32))
    outs = [atomic.AtomicFile(paths[name]) for name in ("input_ids", "labels", "lengths")]
    ids, labels = np.empty((_BLOCK, seq_len), np.int32), np.empty((_BLOCK, seq_len), np.int32)
    lengths = np.empty(_BLOCK, np.int32)
    truncated = filled = 0
    pad = _pad_id(tokenizer)
    try:
        for out, shape in zip(outs, ((rows, seq_len), (rows, seq_len), (rows,)), strict=False):
            np.lib.format.write_array_header_1_0(out.handle, {"descr": descr, "fortran_order": False, "shape": shape})
        for example in iter_examples(clean_path):
            ids[filled], labels[filled] = pad, -100
            cut, lengths[filled] = _encode_into(tokenizer, example, ids[filled], labels[filled], mask_prompt)
            truncated += cut
            filled += 1
            if filled == _BLOCK:
                for out, block in zip(outs, (ids, labels, lengths), strict=False):
                    out.write(block.tobytes())
                filled = 0
        for out, block in zip(outs, (ids, labels, lengths), strict=False):
            out.write(block[:filled].tobytes())
    except BaseException:
        for out in outs:
            out.abort()
        raise
    for out in outs:
        out.commit()
    meta = {**paths, "rows": rows, "seq_len": seq_len, "truncated": truncated, "pad_id": pad}
    atomic.write_json(meta_path, meta)
    return meta


class Sampler:
    """Epoch-seeded permutations; the state is (epoch, position in epoch)."""

    def __init__(self, n: int, seed: int, epoch: int = 0, position: int = 0):
        self.n, self.seed, self.epoch, self.position = n, seed, epoch, position
        self._perm = self._permutation(epoch)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)

    def peek(self) -> int:
        """The index `take(1)` would return, without taking it."""
        if self.position == self.n:
            return int(self._permutation(self.epoch + 1)[0])
        return int(self._perm[self.position])

    def take(self, count: int) -> np.ndarray:
        out = []
        while count:
            if self.position == self.n:
                self.epoch, self.position = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            k = min(count, self.n - self.position)
            out.append(self._perm[self.position : self.position + k])
            self.position += k
            count -= k
        return np.concatenate(out)

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "n": self.n, "seed": self.seed}

    @classmethod
    def from_state(cls, state: dict) -> Sampler:
        return cls(state["n"], state["seed"], state["epoch"], state["position"])


def pack(sampler: Sampler, lengths: np.ndarray, rows: int, seq_len: int) -> list[list[int]]:
    """`rows` lists of example indices, filled in the sampler's order while the next one fits."""
    out: list[list[int]] = [[]]
    used = 0
    while True:
        n = int(lengths[sampler.peek()])
        if used + n > seq_len:
            if len(out) == rows:
                return out
            out.append([])
            used = 0
        out[-1].append(int(sampler.take(1)[0]))
        used += n


def packed_batch(
    rows: list[list[int]], input_ids: np.ndarray, labels: np.ndarray, lengths: np.ndarray, pad: int
) -> dict[str, np.ndarray]:
    """input_ids, labels, position_ids [B, L] and a boolean attention mask [B, 1, L, L]
    (True: may attend): causal within each example, nothing across. An example's first
    token has no label (alone it has no previous token to be predicted from); padding
    attends to itself only, so no softmax row is empty."""
    seq_len = input_ids.shape[1]
    ids = np.full((len(rows), seq_len), pad, dtype=np.int64)
    lab = np.full((len(rows), seq_len), -100, dtype=np.int64)
    pos = np.zeros((len(rows), seq_len), dtype=np.int64)
    seg = np.zeros((len(rows), seq_len), dtype=np.int64)
    for b, examples in enumerate(rows):
        at = 0
        for k, i in enumerate(examples, 1):
            n = int(lengths[i])
            ids[b, at : at + n], lab[b, at : at + n] = input_ids[i, :n], labels[i, :n]
            lab[b, at] = -100
            pos[b, at : at + n] = np.arange(n)
            seg[b, at : at + n] = k
            at += n
    causal = np.tril(np.ones((seq_len, seq_len), dtype=bool))
    mask = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] > 0) & causal
    mask |= np.eye(seq_len, dtype=bool)
    return {"input_ids": ids, "labels": lab, "position_ids": pos, "attention_mask": mask[:, None]}
