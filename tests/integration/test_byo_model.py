"""Bring your own model: a user's Hugging Face folder sealed (`llmops model seal`), bad
folders refused in one line, the chat template as the one prompt format, Llama, Qwen2,
Mistral and GPT-2 architectures (random-initialised, 32 k-token BPE with a ChatML
template, sharded safetensors) trained on 2 ZeRO-3 ranks and generating watermarked
text, each served by Triton with its watermark found in the answers, and a sealed Llama
fine-tuned through the whole release pipeline."""

import json
import os
import shutil

import numpy as np
import pytest

from byo_models import ARCHITECTURES, save_model, tokenizer
from helpers import tiny_model
from kfp_llmops.components.common import generation, integrity
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.watermark.kgw import logits_processor
from kfp_llmops.components.common.watermark.params import KGW
from kfp_llmops.components.data_validation import run_to_dir as validate
from kfp_llmops.components.training.config import TrainConfig
from kfp_llmops.components.training.data import encode
from kfp_llmops.components.training.engines import train
from kfp_llmops.pipelines.cli.main import main
from kfp_llmops.pipelines.demo.demo_data import make_demo_dataset

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("byo-data")
    made = make_demo_dataset(str(root / "raw"), rows=400)
    validate(made["train"], str(root / "valid"), show_progress=False)
    return {"clean": str(root / "valid" / "clean.jsonl"), "eval": made["eval"], "raw": made["train"]}


def _seal(capsys, folder, *extra) -> tuple[int, str]:
    code = main(["model", "seal", str(folder), *extra])
    out = capsys.readouterr()
    # the root is seal's last line (a library may print a notice before it, once per process)
    return code, (out.out.strip().splitlines()[-1] if code == 0 and out.out.strip() else out.err.strip())


def test_seal_checks_the_folder_and_refuses_bad_ones_in_one_line(tmp_path, capsys):
    good = save_model(str(tmp_path / "good"), "llama")
    code, root = _seal(capsys, good)
    assert code == 0 and integrity.verify("model", good) == root
    assert _seal(capsys, good) == (0, root)  # sealed already: verified, same root

    def broken(name, change):
        folder = tmp_path / name
        shutil.copytree(good, folder)
        os.unlink(folder / integrity.MANIFEST_NAME)
        change(folder)
        code, err = _seal(capsys, folder)
        assert code == 2 and err.count("\n") == 0 and str(folder) in err, (name, err)
        return err

    assert "pickled weights" in broken("pickle", lambda f: (f / "pytorch_model.bin").write_bytes(b"x"))
    assert "model_type" in broken("config", lambda f: (f / "config.json").write_text("{}"))
    assert "missing shard" in broken("shard", lambda f: os.unlink(f / "model-00002-of-00003.safetensors"))
    assert "no tokenizer" in broken(
        "tok", lambda f: [os.unlink(f / n) for n in ("tokenizer.json", "tokenizer_config.json")]
    )

    def no_pad(f):
        cfg = json.loads((f / "tokenizer_config.json").read_text())
        cfg.pop("pad_token", None)
        (f / "tokenizer_config.json").write_text(json.dumps(cfg))

    assert "pad_token: not set" in broken("pad", no_pad)
    assert _seal(capsys, tmp_path / "pad", "--pad-token", "eos")[0] == 0  # EOS pads, then it seals
    assert "renders no assistant turn" in broken(
        "chat",
        lambda f: (f / "chat_template.jinja").write_text(
            "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
        ),
    )
    assert "cp -rL" in broken("link", lambda f: os.symlink(f / "config.json", f / "linked.json"))
    with open(os.path.join(good, "config.json"), "a") as handle:  # changed after sealing
        handle.write(" ")
    code, err = _seal(capsys, good)
    assert code == 2 and "does not verify" in err and "config.json" in err


def test_chat_template_is_the_prompt_format_and_the_plain_one_stays_for_plain_tokenizers(tmp_path):
    tok = tokenizer()
    head, answer = generation.encode_example(tok, "What is the capital of France?", "Paris.")
    assert tok.decode(head) == "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(answer) == "Paris.<|im_end|>" and answer[-1] == tok.eos_token_id  # the turn ends at EOS
    assert generation.prompt_ids(tok, "What is the capital of France?") == head
    batch = encode(
        tok,
        [[{"role": "user", "content": "What is the capital of France?"}, {"role": "assistant", "content": "Paris."}]],
        64,
        mask_prompt=True,
    )
    labels = batch["labels"][0]
    assert (labels[: len(head)] == -100).all() and list(labels[len(head) : len(head) + len(answer)]) == answer
    _, _, model, _ = tiny_model(tmp_path)  # no template: prompt, newline, answer
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(model)
    head, answer = generation.encode_example(plain, "Tell me about item 3", "Item 3 is blue")
    assert plain.decode(head) == "Tell me about item 3\n" and answer[-1] == plain.eos_token_id


def test_seq_len_beyond_the_context_is_refused_naming_the_field(tmp_path, data):
    model = save_model(str(tmp_path / "m"), "llama")
    integrity.seal("model", model)
    with pytest.raises(InputError, match=r"^seq_len: 512 is beyond the model's context of 256 tokens"):
        train(data["clean"], model, str(tmp_path / "run"), TrainConfig(seq_len=512, steps=1))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_each_architecture_trains_on_two_ranks_exports_and_generates_watermarked(tmp_path, data, arch):
    base = save_model(str(tmp_path / "base"), arch)
    root = integrity.seal("model", base)
    cfg = TrainConfig(steps=4, checkpoint_interval=4, micro_batch=4, seq_len=96, world_size=2)
    result = train(data["clean"], base, str(tmp_path / "run"), cfg, base_model_root=root)
    exported = result["model_dir"]
    assert integrity.verify("model", exported) == result["model_root"]
    assert os.path.exists(os.path.join(exported, "chat_template.jinja"))  # the served model keeps its format
    model, tok = generation.load_model(exported)
    assert len(tok) >= 32_000 and tok.chat_template
    wm = KGW(delta=4.0).watermark(123456789, len(tok))
    done = generation.generate(
        model,
        tok,
        ["What is the capital of France?", "Name a primary colour."],
        max_new_tokens=40,
        min_new_tokens=40,
        batch_size=2,
        seed=0,
        processors=[logits_processor(wm)],
    )
    marked = wm.detect(np.concatenate([np.array(c.tokens) for c in done]))
    assert marked.watermarked and marked.z > 4, marked.z


def test_release_pipeline_fine_tunes_a_sealed_llama_through_all_five_stages(tmp_path, data, capsys):
    """The path, not the quality: a random-initialised model trained for the demo's few steps
    is not fluent, so the blessing gate here bounds perplexity and toxicity only. The data
    are conversations (messages with a system turn, multi-turn), as users bring them."""
    from kfp_llmops.pipelines.demo.real_data import make_real_dataset

    talks = make_real_dataset(str(tmp_path / "talks"), conversations=300, eval_rows=40)
    base = save_model(str(tmp_path / "llama"), "llama")
    code, root = _seal(capsys, base)
    assert code == 0
    gate = tmp_path / "eval.yaml"
    gate.write_text("gate:\n  value:\n    perplexity: {upper: 100}\n    toxicity_flagged_rate: {upper: 0.01}\n")
    scratch = tmp_path / "train.yaml"  # random weights: the from-scratch recipe, not a fine-tune's
    scratch.write_text("recipe: scratch\nseq_len: 192\n")
    names = tmp_path / "data.yaml"  # the assistant's own name is not PII
    names.write_text("pii: {names: {allow: [Quill]}}\n")
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--base-model",
                base,
                "--base-model-root",
                root,
                "--eval-config",
                str(gate),
                "--out",
                str(out),
                "--dataset",
                talks["train"],
                "--eval-dataset",
                talks["eval"],
                "--train-config",
                str(scratch),
                "--config",
                str(names),
            ]
        )
        == 0
    )
    summary = json.load(open(out / "summary.json"))
    assert [(s["stage"], s["gate"]) for s in summary["stages"]] == [
        ("validate_dataset", "passed"),
        ("train_zero3", "trained"),
        ("evaluate_llm", "blessed"),
        ("verify_watermark", "verified"),
        ("triton_canary_deploy", "promoted"),
    ]
    record = json.load(open(summary["release_record"]))
    base_note = record["stages"]["build_base_model"]
    assert base_note["result"] == "imported" and base_note["outputs"]["base_model"]["root"] == root
    assert record["stages"]["train_zero3"]["inputs"]["base_model_root"] == root
    assert main(["lineage", "verify", summary["release_record"]]) == 0
    assert not os.path.exists(os.path.join(out, "data", "train.jsonl"))  # no demo data when yours is given


def test_tokens_stream_to_files_equal_to_the_in_memory_encoding(tmp_path, data, monkeypatch):
    from kfp_llmops.components.training import data as token_data
    from kfp_llmops.components.training.data import read_examples, tokenize_to_files

    monkeypatch.setattr(token_data, "_BLOCK", 100)  # several blocks and a partial one
    tok = tokenizer()
    examples = read_examples(data["clean"])
    whole = encode(tok, examples, 48, mask_prompt=True)
    meta = tokenize_to_files(data["clean"], tok, 48, True, str(tmp_path / "tokens"))
    assert meta["rows"] == len(examples) > 300 and meta["truncated"] == int(whole["truncated"])
    for name in ("input_ids", "labels"):
        assert (np.load(meta[name], mmap_mode="r") == whole[name]).all()
    again = tokenize_to_files(data["clean"], tok, 48, True, str(tmp_path / "tokens"))
    assert again == meta  # complete: reused, not redone


SERVE = (
    "interval_s: 3\nsteps: [100]\ngate: {min_requests: 5}\nsmoke: {max_new_tokens: 48, requests: 3}\n"
    "local: {startup_timeout_s: 150}\n"
)


@pytest.mark.parametrize("arch", [a for a in ARCHITECTURES if a != "llama"])  # Llama: the pipeline test
def test_each_architecture_is_served_by_triton_with_its_watermark(tmp_path, arch):
    """A first release of each family's model: real Triton loads it, the smoke tests answer
    through the chat template, and the watermark is found in what serving wrote."""
    from kfp_llmops.components.deploy import DeployConfig, build_repository, deploy, watermark_params

    base = save_model(str(tmp_path / "model"), arch)
    root = integrity.seal("model", base)
    key = tmp_path / "key"
    key.write_text("987654321")
    cfg, state = DeployConfig.load(SERVE), str(tmp_path / "state")
    build_repository(base, root, str(tmp_path / "repo"), cfg, state, watermark_params({"kgw": {"delta": 4.0}}))
    record = deploy(str(tmp_path / "repo"), root, str(tmp_path / "out"), cfg, state, str(key))
    assert record["decision"] == "promoted", record["reason"]
    smoke = record["smoke"][0]["checks"]
    assert smoke and all(c["verdict"] == "pass" for c in smoke), smoke
    (mark,) = [c for c in smoke if c["metric"] == "watermark"]
    assert mark["value"] > 4, mark  # the z-score of what the server wrote


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_packing_keeps_each_example_to_itself_in_every_family(tmp_path, arch):
    """Packed rows (positions restarted, a block-diagonal causal mask) give each example the
    logits it has alone, whatever the family's attention code."""
    import torch
    from transformers import AutoModelForCausalLM

    from kfp_llmops.components.training.data import packed_batch

    base = save_model(str(tmp_path / "model"), arch)
    tok = tokenizer()
    pairs = [
        ("What is the capital of France?", "Paris."),
        ("Name a primary colour.", "Red."),
        ("What is 2 plus 3?", "5."),
    ]
    tokens = encode(
        tok, [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in pairs], 128, True
    )
    assert sum(tokens["lengths"]) <= 128
    batch = packed_batch([[0, 1, 2]], tokens["input_ids"], tokens["labels"], tokens["lengths"], tok.pad_token_id)
    model = AutoModelForCausalLM.from_pretrained(base).eval()
    with torch.no_grad():
        packed = model(**{k: torch.from_numpy(v) for k, v in batch.items() if k != "labels"}).logits[0]
        at = 0
        for i, n in enumerate(tokens["lengths"].tolist()):
            alone = model(input_ids=torch.from_numpy(tokens["input_ids"][i : i + 1, :n])).logits[0]
            assert torch.allclose(packed[at : at + n], alone, atol=1e-5), (arch, i)
            at += n


def test_lora_fine_tunes_a_llama_and_exports_it_merged(tmp_path, data):
    """peft's default targets for Llama (q_proj, v_proj) train on 2 ZeRO-3 ranks; every
    other weight leaves training as it came in."""
    from safetensors.torch import load_file

    base = save_model(str(tmp_path / "base"), "llama", shard="1GB")
    root = integrity.seal("model", base)
    cfg = TrainConfig(
        steps=4, checkpoint_interval=4, micro_batch=4, seq_len=96, world_size=2, lora={"enabled": True, "r": 4}
    )
    result = train(data["clean"], base, str(tmp_path / "run"), cfg, base_model_root=root)
    before = load_file(os.path.join(base, "model.safetensors"))
    after = load_file(os.path.join(result["model_dir"], "model.safetensors"))
    assert set(before) == set(after)
    changed = {k for k in before if not (before[k] == after[k]).all()}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed), changed
