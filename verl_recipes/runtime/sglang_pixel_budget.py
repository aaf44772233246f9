"""A VL request's pixel budget on an SGLang rollout: verl 0.9.1 sends it, its SGLang server cannot take it.

verl's LLM server manager hands each request's data.mm_processor_kwargs (the pixel budget of configs/vision/one_image)
to the rollout server whenever it is set (verl/workers/rollout/llm_server.py). vLLMHttpServer.generate takes it;
SGLangHttpServer.generate has no such parameter, so Ray's argument check failed every VL request on SGLang with
TypeError "got an unexpected keyword argument 'mm_processor_kwargs'" (the tiny VL smoke, 1 x H200, 2026-11-29).
SGLang applies a budget per server instead: ServerArgs.mm_process_config["image"] goes to its HF processor for every
image, and configs/vision/one_image sets it from the same data.mm_processor_kwargs.

This gives SGLangHttpServer.generate the parameter and checks each request's budget against the server's: a request
cut to another budget would get another number of image tokens than verl's prompt holds, so it fails, naming both
keys. A verl whose server takes the parameter (or any keyword) is left alone.

verl loads this module in every process (the `verl.plugins` entry point in pyproject.toml); it patches verl's SGLang
server module when a process imports it, which only an SGLang run does.
"""

from __future__ import annotations

import inspect

from verl_recipes.runtime.after_import import after_import

MODULE = "verl.workers.rollout.sglang_rollout.async_sglang_server"
PARAMETER = "mm_processor_kwargs"
SERVED = "actor_rollout_ref.rollout.engine_kwargs.sglang.mm_process_config.image"


def served_budget(config) -> dict:
    """The image settings the SGLang server's processor applies (its rollout config's engine_kwargs)."""
    sglang = (config.get("engine_kwargs") or {}).get("sglang") or {}
    return dict((sglang.get("mm_process_config") or {}).get("image") or {})


def check(requested: dict | None, served: dict) -> None:
    if requested and dict(requested) != served:
        raise ValueError(f"this request's data.mm_processor_kwargs {dict(requested)} differ from the SGLang server's "
                         f"{SERVED} {served}: SGLang would cut its image into another number of tokens than verl's "
                         f"prompt holds; set {SERVED} to ${{data.mm_processor_kwargs}} (configs/vision/one_image.yaml)")


def taking_budget(generate):
    """`generate` with a keyword-only mm_processor_kwargs, checked and not passed on. Ray checks a call's arguments
    against the signature it reads when the actor class is made, so the new one is declared in __signature__."""
    signature = inspect.signature(generate)
    if any(p.name == PARAMETER or p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return generate

    async def generate_with_budget(self, *args, mm_processor_kwargs=None, **kwargs):
        check(mm_processor_kwargs, served_budget(self.config))
        return await generate(self, *args, **kwargs)

    extra = inspect.Parameter(PARAMETER, inspect.Parameter.KEYWORD_ONLY, default=None)
    generate_with_budget.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])
    generate_with_budget.__name__, generate_with_budget.__qualname__ = generate.__name__, generate.__qualname__
    return generate_with_budget


def patch(module) -> None:
    module.SGLangHttpServer.generate = taking_budget(module.SGLangHttpServer.generate)


after_import(MODULE, patch)
