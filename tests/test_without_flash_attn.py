"""No flash-attn: chunked log-probs equal the float64 reference (values and gradients), they replace verl's function
where verl imported it and only where flash-attn's cross-entropy is absent, the hook loads through
VERL_USE_EXTERNAL_MODULES, make check guards torch_varlen, and the launcher adds the right fragment by itself."""

import os
import subprocess
import sys

import pytest
import torch

from verl_recipes import catalog
from verl_recipes.check.model import attention, fused_kernels
from verl_recipes.check.preflight import attention_fragment, attention_path
from verl_recipes.compose import compose
from verl_recipes.runtime import logprobs


def reference(logits: torch.Tensor, labels: torch.Tensor, grad: torch.Tensor):
    """log p(label) and d(sum grad * logp)/d logits in float64, from the same (rounded) inputs."""
    x = logits.detach().double().requires_grad_()
    out = torch.log_softmax(x, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    (out * grad.double()).sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])  # grads stored in dtype
@pytest.mark.parametrize("shape", [(37, 1000), (3, 5, 777)])
@pytest.mark.parametrize("inplace", [False, True])
def test_chunked_logprobs_equal_the_reference(monkeypatch, dtype, tolerance, shape, inplace):
    monkeypatch.setattr(logprobs, "SCRATCH_BYTES", 4 * 1000 * 7)  # several chunks, the last one short
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(*shape, generator=generator) * 4).to(dtype)
    labels = torch.randint(0, shape[-1], shape[:-1], generator=generator)
    grad = torch.randn(shape[:-1], generator=generator)
    expected, expected_grad = reference(logits, labels, grad)

    leaf = logits.clone().requires_grad_()
    out = logprobs.logprobs_from_logits(leaf * 1, labels, inplace_backward=inplace)  # a non-leaf, as verl's logits
    (out * grad).sum().backward()
    assert out.dtype == torch.float32 and out.shape == labels.shape
    assert (out.double() - expected).abs().max() < 1e-4  # float32 math on the same (rounded) logits
    assert (leaf.grad.double() - expected_grad).abs().max() < tolerance


def test_chunked_logprobs_agree_with_verls_own_fallback():
    import verl.utils.torch_functional as verl_F

    generator = torch.Generator().manual_seed(1)
    logits, labels = torch.randn(50, 300, generator=generator), torch.randint(0, 300, (50,), generator=generator)
    assert torch.allclose(logprobs.logprobs_from_logits(logits, labels), verl_F.logprobs_from_logits_v2(logits, labels),
                          atol=1e-5)


def test_use_swaps_verls_function_everywhere_and_back():
    import verl.utils.torch_functional as verl_F
    from verl.workers.engine.fsdp import transformer_impl

    try:
        logprobs.use(True)
        assert transformer_impl.logprobs_from_logits is logprobs.logprobs_from_logits is verl_F.logprobs_from_logits
        assert logprobs.logprobs_from_logits.__module__ == logprobs.__name__  # our own name is never rebound
    finally:
        logprobs.use(False)
    assert transformer_impl.logprobs_from_logits is verl_F.logprobs_from_logits is verl_F._verl_logprobs_from_logits
    assert not logprobs.in_use()


@pytest.mark.slow
def test_the_hook_loads_at_import_verl_and_defers_to_flash_attn():
    """What a Ray worker of +configs/attention=torch_varlen gets; VERL_DISABLE_FLASH_ATTN_CE stands in for the
    installed/not installed switch verl itself reads."""
    code = ("import verl\nfrom verl.workers.engine.fsdp import transformer_impl as t\n"
            "from transformers import AttentionInterface\n"
            "print(t.verl_F.entropy_from_logits.__module__)\n"
            "print(t.logprobs_from_logits.__module__, 'torch_varlen' in AttentionInterface._global_mapping)")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "verl_recipes.runtime.without_flash_attn"}
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    entropy, *chunked = ran.stdout.split()[-3:]
    assert entropy == "verl_recipes.runtime.padded_entropy"
    assert chunked == (["verl.utils.torch_functional", "True"] if logprobs.flash_attn_cross_entropy_available()
                       else ["verl_recipes.runtime.logprobs", "True"])


@pytest.fixture(scope="module")
def qwen25():
    return catalog.get("qwen25-7b-grpo")


@pytest.mark.slow
def test_torch_varlen_needs_the_hook_a_text_model_and_no_ulysses(qwen25):
    assert attention(compose(qwen25, ["+configs/attention=torch_varlen"])) == []
    alone = attention(compose(qwen25, ["+actor_rollout_ref.model.override_config.attn_implementation=torch_varlen"]))
    assert len(alone) == 1 and "VERL_USE_EXTERNAL_MODULES" in alone[0]
    sp = attention(compose(qwen25, ["+configs/attention=torch_varlen",
                                    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2"]))
    assert any("'actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size' = 2" in e for e in sp)
    vl = attention(compose(catalog.get("qwen25-vl-7b-geo3k-dapo"), ["+configs/attention=torch_varlen"]))
    assert any("sdpa_padded" in e for e in vl)


@pytest.mark.slow
def test_fused_kernels_are_refused_for_an_untied_lm_head_on_fsdp2(qwen25):
    untied = fused_kernels(compose(qwen25, ["actor_rollout_ref.model.use_fused_kernels=true"]))
    assert len(untied) == 1 and "untied lm_head" in untied[0]
    tied = compose(qwen25, ["actor_rollout_ref.model.use_fused_kernels=true",
                            "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct"])
    assert fused_kernels(tied) == []


def test_the_launcher_picks_the_fragment_and_says_which_path_runs(qwen25):
    cfg = compose(qwen25)
    assert attention_fragment(cfg) == "torch_varlen"
    assert attention_fragment(compose(catalog.get("qwen25-vl-7b-geo3k-dapo"))) == "sdpa_padded"
    assert attention_fragment(compose(qwen25, ["+configs/attention=torch_varlen"])) is None
    if logprobs.flash_attn_cross_entropy_available():
        pytest.skip("flash-attn is installed here: the chunked path is not what runs")
    path = attention_path(compose(qwen25, ["+configs/attention=torch_varlen"]))
    assert path == "attention PyTorch varlen_attn (torch_varlen) on packed rows; log-probs chunked (verl_recipes.runtime.logprobs)"


@pytest.mark.slow
def test_a_dry_launch_without_flash_attn_adds_the_fragment(qwen25, capsys, run_env):
    from importlib.util import find_spec

    from verl_recipes.launch import plan_launch

    if find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here: nothing to replace")
    plan = plan_launch(qwen25, [], dry=True)
    assert "+configs/attention=torch_varlen" in plan.args
    assert plan.cfg.actor_rollout_ref.model.override_config.attn_implementation == "torch_varlen"
    assert "flash-attn is not installed here: adding +configs/attention=torch_varlen" in capsys.readouterr().out
