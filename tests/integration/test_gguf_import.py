"""A GGUF model imported (`llmops model import`): the Hugging Face folder it writes holds
exactly the weights, tokenizer and chat template of the model the GGUF was made from,
sealed; bad files are refused in one line; and the import trains on conversations for a
step (the pretrained-model recipe) and answers a request from a real Triton server."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from byo_models import save_model
from gguf_models import write_llama_gguf
from helpers import llmops, write_lines
from kfp_llmops.components.common import integrity

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    hf = save_model(str(root / "hf"), "llama", vocab=2000, shard="1GB")
    return {"root": root, "hf": hf, "gguf": write_llama_gguf(hf, str(root / "model.gguf"))}


@pytest.fixture(scope="module")
def imported(made):
    out = str(made["root"] / "imported")
    code, stdout, stderr = llmops("model", "import", "--gguf", made["gguf"], "--out", out)
    assert code == 0, stderr
    return {"dir": out, "root": stdout.strip().splitlines()[-1]}


def test_the_import_is_the_model_the_gguf_was_made_from(made, imported):
    from transformers import AutoTokenizer

    assert integrity.verify("model", imported["dir"]) == imported["root"]
    before = load_file(os.path.join(made["hf"], "model.safetensors"))
    after = load_file(os.path.join(imported["dir"], "model.safetensors"))
    assert set(before) == set(after) and all(torch.equal(before[k], after[k]) for k in before)
    theirs, ours = AutoTokenizer.from_pretrained(made["hf"]), AutoTokenizer.from_pretrained(imported["dir"])
    text = "What is the capital of France? 12 plus 3 is 15."
    assert ours.encode(text) == theirs.encode(text)
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert ours.apply_chat_template(chat, tokenize=False) == theirs.apply_chat_template(chat, tokenize=False)
    assert ours.eos_token == "<|im_end|>" and ours.pad_token is not None
    config = json.load(open(os.path.join(imported["dir"], "config.json")))
    assert "transformers_version" not in config and "quantization_config" not in config
    # the same file imports to the same root, and a pinned root refuses anything else
    again = str(made["root"] / "again")
    code, stdout, _ = llmops(
        "model", "import", "--gguf", made["gguf"], "--out", again, "--expect-root", imported["root"]
    )
    assert code == 0 and stdout.strip().splitlines()[-1] == imported["root"]
    code, _, stderr = llmops(
        "model", "import", "--gguf", made["gguf"], "--out", str(made["root"] / "other"), "--expect-root", "0" * 64
    )
    assert code == 2 and "is not the pinned" in stderr and not os.path.exists(made["root"] / "other")


def test_bad_gguf_files_are_refused_in_one_line_and_leave_nothing(made, tmp_path):
    whole = open(made["gguf"], "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 2])
    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n")
    other = write_llama_gguf(made["hf"], str(tmp_path / "rwkv.gguf"), architecture="rwkv6")
    for path, message in (
        (cut, "truncated or damaged GGUF"),
        (text, "not a GGUF file"),
        (other, "general.architecture 'rwkv6': transformers cannot dequantize it"),
        (tmp_path / "absent.gguf", "GGUF file not found"),
    ):
        out = tmp_path / f"out-{os.path.basename(str(path))}"
        code, _, stderr = llmops("model", "import", "--gguf", str(path), "--out", str(out))
        assert code == 2 and stderr.startswith(f"error: {path}: {message}"), stderr
        assert len(stderr.strip().splitlines()) == 1 and not os.path.exists(out)
        assert not list(tmp_path.glob("*.importing"))
    kept = tmp_path / "notes"  # a folder of the user's own, named by mistake
    kept.mkdir()
    (kept / "todo.txt").write_text("mine")
    code, _, stderr = llmops("model", "import", "--gguf", made["gguf"], "--out", str(kept))
    assert code == 2 and stderr.startswith(f"error: {kept}: not an empty folder"), stderr
    assert os.listdir(kept) == ["todo.txt"] and (kept / "todo.txt").read_text() == "mine"


def test_an_imported_model_trains_on_conversations_and_serves_a_request(imported, tmp_path):
    from kfp_llmops.components.data_validation import run_to_dir as validate
    from kfp_llmops.components.deploy import DeployConfig, build_repository, deploy, watermark_params
    from kfp_llmops.components.training.config import TrainConfig
    from kfp_llmops.components.training.engines import train

    talks = [
        {
            "messages": [
                {"role": "system", "content": "You are brief."},
                {"role": "user", "content": f"What is {a} plus {b}?"},
                {"role": "assistant", "content": f"{a + b}."},
                {"role": "user", "content": "And doubled?"},
                {"role": "assistant", "content": f"{2 * (a + b)}."},
            ]
        }
        for a in range(1, 9)
        for b in range(1, 9)
    ]
    raw = write_lines(tmp_path / "raw.jsonl", talks)
    valid = validate(
        raw, str(tmp_path / "valid"), config_source="pii: {names: {enabled: false}}\n", show_progress=False
    )
    assert valid.metrics["rows_out"] == len(talks)
    result = train(
        str(tmp_path / "valid" / "clean.jsonl"),
        imported["dir"],
        str(tmp_path / "run"),
        TrainConfig(steps=1, checkpoint_interval=1, micro_batch=2, world_size=2),
        base_model_root=imported["root"],
    )
    assert result["step"] == 1 and result["recipe"] == "lora" and result["seq_len"] == 256  # capped at the context
    model_dir, root = result["model_dir"], result["model_root"]
    key = tmp_path / "key"
    key.write_text("987654321")
    cfg = DeployConfig.load(
        "interval_s: 3\nsteps: [100]\ngate: {min_requests: 5}\n"
        "smoke: {max_new_tokens: 48, requests: 3}\nlocal: {startup_timeout_s: 150}\n"
    )
    state = str(tmp_path / "state")
    build_repository(model_dir, root, str(tmp_path / "repo"), cfg, state, watermark_params({"kgw": {"delta": 4.0}}))
    record = deploy(str(tmp_path / "repo"), root, str(tmp_path / "out"), cfg, state, str(key))
    assert record["decision"] == "promoted", record["reason"]
    smoke = record["smoke"][0]["checks"]
    assert smoke and all(c["verdict"] == "pass" for c in smoke), smoke
    # A chat request, rendered by the server with the model's chat template, streamed: the
    # answer the generation routine gives the same conversation.
    from kfp_llmops.components.common.detokenize import answer_text
    from kfp_llmops.components.common.generation import generate, has_chat_template, load_model, prompt_ids
    from kfp_llmops.components.common.watermark.kgw import logits_processor
    from kfp_llmops.components.deploy import llm_client
    from kfp_llmops.components.deploy.local_target import serving

    chat = talks[0]["messages"][:2]
    with serving(state, key_file=str(key)) as (url, info):
        got = llm_client.ask(url, "llm", llm_client.request(chat, stream=True))
    model, tok = load_model(model_dir)
    assert has_chat_template(tok) and tok.decode(prompt_ids(tok, chat)).startswith("<|im_start|>system\nYou are brief.")
    marked = logits_processor(watermark_params({"kgw": {"delta": 4.0}}).watermark(987654321, len(tok)))
    done = generate(model, tok, [chat], max_new_tokens=24, batch_size=1, seed=0, do_sample=False, processors=[marked])
    assert got.ok and got.text == answer_text(tok, done[0].tokens), (got.error, got.text)
