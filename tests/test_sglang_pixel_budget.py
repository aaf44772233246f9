"""A VL request's pixel budget on an SGLang rollout (verl_recipes/runtime/sglang_pixel_budget.py): verl 0.9.1's
SGLangHttpServer.generate, rebuilt from verl's installed source (its module imports sglang, which this machine lacks),
checked by Ray's own argument check with the keywords verl's server manager sends a VL request. (On a local Ray
instance, 2026-11-29, an actor of this class reproduced the GPU failure unpatched and served the request patched; at
35 s a run, that check is not kept in the suite: Ray's check below is the same code.)"""

import ast
import asyncio
import inspect
import types
from pathlib import Path

import pytest
from ray._common.signature import extract_signature, flatten_args

from verl_recipes import catalog
from verl_recipes.compose import compose
from verl_recipes.runtime import forced_lengths
from verl_recipes.runtime.sglang_pixel_budget import MODULE, SERVED, patch, served_budget, taking_budget

verl = pytest.importorskip("verl")
BUDGET = {"min_pixels": 3136, "max_pixels": 401408}
# what verl/workers/rollout/llm_server.py hands server.generate.remote for a one-image prompt with a pixel budget
REQUEST = {"request_id": "r0", "prompt_ids": [1, 2, 3], "sampling_params": {"temperature": 1.0},
           "image_data": ["<image>"], "video_data": None, "mm_processor_kwargs": BUDGET}


def verl_generate():
    """verl's SGLangHttpServer.generate with its own parameters and defaults; its body returns what it was given."""
    path = Path(verl.__file__).parent / (MODULE.removeprefix("verl.").replace(".", "/") + ".py")
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "SGLangHttpServer")
    node = next(n for n in cls.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "generate")
    for arg in node.args.args + node.args.kwonlyargs:
        arg.annotation = None
    scope = {}
    exec(f"async def generate({ast.unparse(node.args)}):\n    return {{k: v for k, v in locals().items() if k != 'self'}}",
         scope)
    return scope["generate"]


def server(image: dict | None):
    engine = {"sglang": {"mm_process_config": {"image": image}}} if image is not None else {}
    return types.SimpleNamespace(config={"engine_kwargs": engine})


def ray_checks(generate, request):
    """Ray's check of a remote call's arguments against the method's signature, as an actor handle makes it: the
    signature of the method unwrapped all the way (ray/actor.py, _ActorClassMethodMetadata.create)."""
    return flatten_args(extract_signature(inspect.unwrap(generate), ignore_first=True), [], request)


def test_verls_sglang_server_refuses_the_budget_verl_sends_it():
    """The failure of the tiny VL smoke on SGLang (1 x H200, 2026-11-29). When verl's server takes the budget, this
    test fails and the patch (which then leaves generate alone) can go."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'mm_processor_kwargs'"):
        ray_checks(verl_generate(), REQUEST)


def test_the_patched_server_takes_the_budget_and_hands_verl_the_rest():
    generate = taking_budget(verl_generate())
    ray_checks(generate, REQUEST)
    given = asyncio.run(generate(server(BUDGET), **REQUEST))
    assert given == {**{k: v for k, v in REQUEST.items() if k != "mm_processor_kwargs"},
                     "bootstrap_host": None, "bootstrap_port": None, "bootstrap_room": None}
    # a text request carries no budget: nothing to check, whatever the server's
    for text in ({}, None):
        asyncio.run(generate(server(None), **{**REQUEST, "mm_processor_kwargs": text}))


def test_a_request_cut_to_another_budget_than_the_servers_fails_naming_both_keys():
    generate = taking_budget(verl_generate())
    for served in ({**BUDGET, "max_pixels": 1003520}, None):
        with pytest.raises(ValueError, match=f"data.mm_processor_kwargs .* differ from the SGLang server's {SERVED}"):
            asyncio.run(generate(server(served), **REQUEST))


def test_the_patch_is_applied_once_keeps_ray_async_and_stacks_with_the_forced_lengths():
    generate = taking_budget(verl_generate())
    assert taking_budget(generate) is generate and inspect.iscoroutinefunction(generate)
    forced = forced_lengths.forcing(generate)  # the bench's wrapper, in either order
    for stacked in (forced, taking_budget(forced_lengths.forcing(verl_generate()))):
        assert "mm_processor_kwargs" in inspect.signature(stacked).parameters
        ray_checks(stacked, REQUEST)
    module = types.SimpleNamespace(SGLangHttpServer=type("SGLangHttpServer", (), {"generate": verl_generate()}))
    patch(module)
    ray_checks(module.SGLangHttpServer.generate, REQUEST)


def test_a_vl_recipe_on_sglang_serves_the_budget_its_prompts_are_cut_by():
    """configs/vision/one_image hands SGLang's server the data's budget, as verl's workers build the rollout config."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose(catalog.parse("qwen25-vl-7b-geo3k-dapo"), ["configs/rollout=sglang"], naming=False)
    assert served_budget(omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)) == dict(cfg.data.mm_processor_kwargs)
    assert dict(cfg.data.mm_processor_kwargs) == BUDGET

