"""Rules for the pass-through blocks verl hands on unchecked: DAPO's reward_kwargs (to the reward manager),
data.mm_processor_kwargs (to the HF processor and to vLLM), rollout.engine_kwargs.vllm (to vLLM's CLI) and
rollout.engine_kwargs.sglang's image settings (to SGLang's processor).

verl's schema cannot see inside these dicts, so a wrong value there surfaces only at run time, after the GPUs
are allocated, or never. `check(cfg)` takes a composed, resolved config and returns one error string per broken
rule, each naming the key and what to do.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

REWARD_KWARGS = "reward.reward_kwargs"
MM_KWARGS = "data.mm_processor_kwargs"
VLLM_KWARGS = "actor_rollout_ref.rollout.engine_kwargs.vllm"
SGLANG_IMAGE = "actor_rollout_ref.rollout.engine_kwargs.sglang.mm_process_config.image"
# vLLM options older recipes pass that vLLM 0.24 no longer parses -> what to write instead
REMOVED_VLLM_OPTIONS = {
    "disable_mm_preprocessor_cache": "mm_processor_cache_gb: 0 (vLLM 0.24 has no disable_mm_preprocessor_cache)",
}


def overlong_buffer(cfg: DictConfig) -> list[str]:
    """DAPO's soft overlong punishment only works through the dapo manager, measured on the real response length."""
    reward_kwargs = cfg.reward.get("reward_kwargs") or {}
    buffer = reward_kwargs.get("overlong_buffer_cfg") or {}
    if not buffer.get("enable"):
        return []
    errors = []
    if cfg.reward.reward_manager.name != "dapo":
        errors.append(f"'{REWARD_KWARGS}.overlong_buffer_cfg' is enabled but reward.reward_manager.name is "
                      f"'{cfg.reward.reward_manager.name}', which ignores it; set reward.reward_manager.name=dapo")
    max_resp_len, length = reward_kwargs.get("max_resp_len"), buffer.get("len")
    if max_resp_len != cfg.data.max_response_length:
        errors.append(f"'{REWARD_KWARGS}.max_resp_len' = {max_resp_len} but data.max_response_length = "
                      f"{cfg.data.max_response_length}: the penalty window would sit in the wrong place; "
                      f"write max_resp_len: ${{data.max_response_length}}")
    elif not isinstance(length, int) or not 0 < length < max_resp_len:
        errors.append(f"'{REWARD_KWARGS}.overlong_buffer_cfg.len' = {length} must be a whole number between 0 and "
                      f"max_resp_len = {max_resp_len} (exclusive): verl's dapo manager asserts len <= max_resp_len, "
                      f"and len = max_resp_len penalises every response; e.g. len: ${{tokens:0.125}}")
    return errors


def pixel_budget(cfg: DictConfig) -> list[str]:
    """transformers 5.9's Qwen2-VL image processor honours min_pixels/max_pixels only as a pair; vLLM honours each.
    A lone bound therefore gives verl and vLLM different image token counts for the same prompt."""
    kwargs = cfg.data.get("mm_processor_kwargs") or {}
    given = [key for key in ("min_pixels", "max_pixels") if kwargs.get(key) is not None]
    if len(given) != 1:
        return []
    other = "max_pixels" if given[0] == "min_pixels" else "min_pixels"
    return [f"'{MM_KWARGS}.{given[0]}' is set without '{other}': transformers ignores a lone bound but vLLM applies "
            f"it, so prompt and image token counts would disagree; set both (configs/vision/one_image.yaml)"]


def sglang_pixel_budget(cfg: DictConfig) -> list[str]:
    """SGLang cuts images by its server's budget, not the request's (verl_recipes/runtime/sglang_pixel_budget.py)."""
    budget = dict(cfg.data.get("mm_processor_kwargs") or {})
    if cfg.actor_rollout_ref.rollout.get("name") != "sglang" or not budget:
        return []
    served = dict(OmegaConf.select(cfg, SGLANG_IMAGE, default=None) or {})
    if served == budget:
        return []
    return [f"'{SGLANG_IMAGE}' = {served} but '{MM_KWARGS}' = {budget}: SGLang would cut images into another number "
            f"of tokens than verl's prompts hold; write image: ${{data.mm_processor_kwargs}} "
            f"(configs/vision/one_image.yaml)"]


def vllm_options(cfg: DictConfig) -> list[str]:
    options = (cfg.actor_rollout_ref.rollout.get("engine_kwargs") or {}).get("vllm") or {}
    return [f"'{VLLM_KWARGS}.{old}' is not a vLLM 0.24 option (vLLM would refuse to start); use {new}"
            for old, new in REMOVED_VLLM_OPTIONS.items() if old in options]


def check(cfg: DictConfig) -> list[str]:
    return overlong_buffer(cfg) + pixel_budget(cfg) + sglang_pixel_budget(cfg) + vllm_options(cfg)
