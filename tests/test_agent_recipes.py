"""The multi-turn agent recipes (retool-qwen25-7b, deepeyes-qwen25-vl-7b) and ReTool's cold-start SFT stage,
composed against the installed verl 0.9.1 and exercised with verl's own tool registry, reward manager, SFT config
and Continuous Token builder (CPU only)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from composed import composed
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf, open_dict
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from verl_recipes import catalog
from verl_recipes.catalog import REPO
from verl_recipes.check.recipe import check
from verl_recipes.data.prepare import outputs
from verl_recipes.data.prompts import CODE_INTERPRETER_CONFIG

RETOOL = "retool-qwen25-7b"
DEEPEYES = "deepeyes-qwen25-vl-7b"
SFT_SCRIPT = REPO / "recipes" / RETOOL / "v1" / "sft.sh"
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"

# recipe -> (tool config, tool names, turn limit, dataset, reward module, smoke overlays `make check` runs)
AGENT_RECIPES = {
    RETOOL: ("code_interpreter.yaml", ["code_interpreter"], 16, "dapo_math_retool", "retool", ["node", "tiny_gpu"]),
    DEEPEYES: ("image_zoom.yaml", ["image_zoom_in_tool"], 5, "deepeyes", "deepeyes", ["node"]),
}




def _tool_schemas(tool_config: Path) -> list[dict]:
    return [tool["tool_schema"] for tool in yaml.safe_load(tool_config.read_text())["tools"]]


# ---------------------------------------------------------------- composed values


@pytest.mark.slow
@pytest.mark.parametrize("name", AGENT_RECIPES)
def test_multi_turn_tool_agent_is_wired(name):
    from verl.tools.tool_registry import load_all_tools

    tool_file, tool_names, turns, _, _, _ = AGENT_RECIPES[name]
    cfg = composed(name)
    multi_turn = OmegaConf.select(cfg, MULTI_TURN)
    assert multi_turn.enable and multi_turn.format == "hermes" and multi_turn.max_parallel_calls == 1
    assert multi_turn.max_assistant_turns == multi_turn.max_user_turns == turns
    assert multi_turn.max_tool_response_length > 256  # verl's default (characters) cuts most tracebacks
    path = Path(multi_turn.tool_config_path)
    assert path.is_absolute() and path == REPO / "agents" / tool_file
    assert [tool.name for tool in load_all_tools(str(path), None)] == tool_names
    assert cfg.data.tool_config_path == str(path)  # the length filter renders the same tool schemas
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "tool_agent"
    assert cfg.data.return_raw_chat is True


@pytest.mark.representative
@pytest.mark.parametrize("name", AGENT_RECIPES)
def test_data_and_reward_keys(name):
    _, _, _, dataset, reward_module, _ = AGENT_RECIPES[name]
    cfg = composed(name)
    val_files = [cfg.data.val_files] if isinstance(cfg.data.val_files, str) else list(cfg.data.val_files)
    assert [cfg.data.train_files, *val_files] == [str(p) for p in outputs(dataset)]  # what `prepare` writes
    assert catalog.get(name).card["data"] == [dataset]
    reward = cfg.reward
    assert (reward.custom_reward_function.path, reward.custom_reward_function.name) == (
        f"pkg://verl_recipes.rewards.{reward_module}", "compute_score")
    assert reward.reward_manager.name == "naive"  # the manager that hands num_turns to the reward
    assert "reward_kwargs" not in reward or not reward.reward_kwargs


@pytest.mark.parametrize("name", AGENT_RECIPES)
def test_no_kl_means_no_reference_model(name):
    from verl.trainer.ppo.utils import need_reference_policy

    cfg = composed(name)
    assert not cfg.actor_rollout_ref.actor.use_kl_loss and not cfg.algorithm.use_kl_in_reward
    assert not need_reference_policy(cfg)
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.actor_rollout_ref.actor.loss_agg_mode == "token-mean"
    assert not cfg.algorithm.filter_groups.enable


def test_retool_objective_and_lengths_follow_the_anchor():
    actor = composed(RETOOL).actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.28, 10.0)
    cfg = composed(RETOOL)
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (2048, 16384)
    assert (cfg.data.train_batch_size, actor.ppo_mini_batch_size, cfg.actor_rollout_ref.rollout.n) == (64, 16, 16)
    assert actor.ppo_max_token_len_per_gpu == int(1.5 * (2048 + 16384))
    assert cfg.actor_rollout_ref.model.path == catalog.get(RETOOL).card["model"] == "Qwen/Qwen2.5-7B-Instruct"


def test_deepeyes_has_what_image_tool_replies_need():
    cfg = composed(DEEPEYES)
    hf_config = json.loads((REPO / "models" / cfg.actor_rollout_ref.model.path / "config.json").read_text())
    assert hf_config["model_type"] == "qwen2_5_vl"  # a VL model: verl loads its processor and the VL token builder
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.limit_images == rollout.multi_turn.max_assistant_turns  # prompt image + one crop per tool round
    assert "image_pad" in cfg.actor_rollout_ref.model.custom_chat_template
    assert cfg.actor_rollout_ref.model.external_lib == "verl_recipes.runtime.freeze_vision"
    # no processor pixel budget: the tool crops the image in qwen_vl_utils' frame, which the processor would
    # otherwise rescale, and the model's bbox coordinates would no longer match the crop
    assert not cfg.data.mm_processor_kwargs


# ---------------------------------------------------------------- make check


@pytest.mark.slow
@pytest.mark.parametrize("name, overlay", [(n, o) for n, spec in AGENT_RECIPES.items() for o in [None, *spec[5]]])
def test_make_check_proves_recipe_and_smoke_overlays(name, overlay):
    recipe = catalog.get(name)
    args = [] if overlay is None else [f"+configs/smoke={overlay}",
                                       f"actor_rollout_ref.model.path={recipe.card['smoke_model']}"]
    assert check(recipe, args) == []


def test_retool_planner_verdict_fits_80gb():
    from verl_recipes.check.memory import memory_plan

    recipe = catalog.get(RETOOL)
    result = memory_plan(composed(RETOOL), recipe)
    assert result.fits and not result.errors, result.verdict
    assert sum(term.gib for term in result.training_terms) < 0.75 * 80  # margin for fragmentation


@pytest.mark.slow
def test_rl_starts_from_the_newest_cold_start_checkpoint(tmp_path, monkeypatch):
    """verl-recipe ReTool's RL starts from its SFT output; the launcher resolves ours (verl_recipes/cold_start.py)."""
    from verl_recipes import cold_start

    recipe = catalog.get(RETOOL)
    monkeypatch.setenv("RL_RUNS_DIR", str(tmp_path))
    monkeypatch.delenv("SFT_CHECKPOINT", raising=False)
    with pytest.raises(catalog.RecipeError, match=r"holds none. Run `bash recipes/retool-qwen25-7b/v1/sft.sh` first"):
        cold_start.model_args(recipe, [])
    checkpoints = tmp_path / "retool-qwen25-7b-v1-sft" / "checkpoints"  # what sft.sh leaves
    for step in (93, 372):
        (checkpoints / f"global_step_{step}" / "huggingface").mkdir(parents=True)
        shutil.copy(REPO / "models" / "Qwen" / "Qwen2.5-7B-Instruct" / "config.json",
                    checkpoints / f"global_step_{step}" / "huggingface")
    args = cold_start.model_args(recipe, [])
    newest = checkpoints / "global_step_372" / "huggingface"
    assert args == [f"actor_rollout_ref.model.path={newest}"]
    assert check(recipe, args) == []
    # an explicit model in ARGS wins; SFT_CHECKPOINT picks another checkpoint
    assert cold_start.model_args(recipe, ["actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct"]) == []
    monkeypatch.setenv("SFT_CHECKPOINT", str(checkpoints / "global_step_93" / "huggingface"))
    assert cold_start.model_args(recipe, [])[0].endswith("global_step_93/huggingface")
    # recipes without a cold start are left alone
    assert cold_start.model_args(catalog.get("qwen25-7b-grpo"), []) == []


@pytest.mark.slow
def test_log_prob_budget_too_large_for_the_logits_is_refused_by_the_planner():
    errors = check(catalog.get(RETOOL), ["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=294912"])
    assert any("old log-prob pass needs" in e and "log_prob_max_token_len_per_gpu" in e for e in errors), errors


def test_unbounded_token_budget_is_refused_by_the_planner():
    recipe = catalog.get(RETOOL)
    errors = check(recipe, ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=294912"])
    assert any("does not fit" in e and "ppo_max_token_len_per_gpu" in e for e in errors), errors


# ---------------------------------------------------------------- the reward sees the agent's turn count


@pytest.fixture(scope="module")
def tokenizer():
    """A tiny byte-level BPE with Qwen's chat, tool and vision tokens (no hub)."""
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>",
               "<|video_pad|>"]
    corpus = ["The answer is \\boxed{42}. Let me zoom in on the sign.", '{"name": "image_zoom_in_tool"}'] * 20
    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    model.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=model, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=special[1:], clean_up_tokenization_spaces=False)
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])  # plain, as in Qwen2.5
    return tok


def _reward_batch(tokenizer, response: str, truth: str, num_turns: int):
    from verl import DataProto

    prompt = tokenizer.encode("Solve it.", add_special_tokens=False)
    answer = tokenizer.encode(response, add_special_tokens=False)
    return DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt]), "responses": torch.tensor([answer]),
                 "attention_mask": torch.ones(1, len(prompt) + len(answer), dtype=torch.long)},
        non_tensors={"data_source": np.array(["math_dapo"], dtype=object),
                     "reward_model": np.array([{"ground_truth": truth}], dtype=object),
                     "extra_info": np.array([{}], dtype=object),
                     "__num_turns__": np.array([num_turns], dtype=np.int32)},
    )


@pytest.mark.parametrize("response, num_turns, score, turns", [
    ("So \\boxed{42}.", 2, 1.0, 2),
    ("So \\boxed{41}.", 2, -1.0, 2),  # wrong, no tool round
    ("So \\boxed{41}.", 6, -0.8, 6),  # wrong after two tool rounds: ReTool's tool-use bonus
    ("So \\boxed{41}.", 12, -0.6, 12),  # the bonus is capped at -0.6
])
def test_verl_reward_manager_hands_num_turns_to_the_retool_reward(tokenizer, response, num_turns, score, turns):
    from verl.trainer.ppo.reward import load_reward_manager

    manager = load_reward_manager(composed(RETOOL), tokenizer)  # the recipe's manager and reward function
    result = manager.loop.run_until_complete(manager.run_single(_reward_batch(tokenizer, response, "42", num_turns)))
    assert result["reward_score"] == pytest.approx(score)
    assert result["reward_extra_info"]["turns"] == turns


# ---------------------------------------------------------------- DeepEyes' chat template


@pytest.fixture(scope="module")
def vl_tokenizer(tokenizer):
    """The test tokenizer with the recipe's chat template, as verl sets custom_chat_template on it."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = composed(DEEPEYES).actor_rollout_ref.model.custom_chat_template
    return tok


IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def _zoom_conversation():
    image = Image.new("RGB", (56, 56), "navy")
    call = {"type": "function", "function": {"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1, 2, 30, 40]}}}
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "What is written?"}]},
        {"role": "assistant", "content": "Let me zoom in.", "tool_calls": [call]},
        {"role": "tool", "content": [{"type": "image", "image": image}, {"type": "text", "text": "Zoomed in."}]},
    ]


def test_template_shows_tools_and_puts_the_crop_into_the_tool_reply(vl_tokenizer):
    schemas = _tool_schemas(REPO / "agents" / "image_zoom.yaml")
    text = vl_tokenizer.apply_chat_template(_zoom_conversation(), tools=schemas, tokenize=False,
                                            add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n")
    assert "\n<tools>\n" + json.dumps(schemas[0], ensure_ascii=False) + "\n</tools>" in text
    assert (f"<|im_start|>user\n{IMAGE}What is written?<|im_end|>\n<|im_start|>assistant\nLet me zoom in.\n"
            '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1, 2, 30, 40]}}\n</tool_call>'
            f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{IMAGE}Zoomed in.\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n") in text


def test_template_without_tools_renders_like_qwen25_vl(vl_tokenizer):
    user = _zoom_conversation()[1]
    assert vl_tokenizer.apply_chat_template([user], tokenize=False, add_generation_prompt=True) == (
        f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{IMAGE}What is written?"
        "<|im_end|>\n<|im_start|>assistant\n")


def test_template_appends_turns_the_way_verl_builds_tokens(vl_tokenizer):
    """verl 0.9.1 never re-renders a trajectory: it appends the model's tokens, then renders only the new tool turn
    (Continuous Token). That equals one render of the whole conversation only if the template is append-only."""
    from verl.utils.tokenizer.continuous_token import QwenContinuousTokenBuilder

    tok = vl_tokenizer
    schemas = _tool_schemas(REPO / "agents" / "image_zoom.yaml")
    conversation = _zoom_conversation()
    whole = tok.apply_chat_template(conversation, tools=schemas, tokenize=True, return_dict=True,
                                    add_generation_prompt=True)["input_ids"]
    builder = QwenContinuousTokenBuilder(tok)
    prompt = builder.build_initial_tokens(conversation[:2], tools=schemas)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    generated = whole[len(prompt): whole.index(im_end, len(prompt)) + 1]  # the model stops at <|im_end|>
    tokens = builder.merge_assistant_tokens(prompt, generated).token_ids
    tokens = builder.merge_context_tokens(conversation[:3], conversation, tokens, tools=schemas).token_ids
    assert whole[: len(prompt)] == prompt
    assert tokens == whole


# ---------------------------------------------------------------- ReTool's cold-start SFT stage


def sft_overrides(*extra: str, data_dir: Path | None = None) -> list[str]:
    env = {**os.environ, "SFT_PRINT_OVERRIDES": "1"}
    if data_dir is not None:
        env["RL_DATA_DIR"] = str(data_dir)
    return subprocess.run(["bash", str(SFT_SCRIPT), *extra], env=env, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def compose_sft(overrides: list[str]):
    from verl_recipes.entrypoints import verl_root

    with initialize_config_dir(config_dir=str(verl_root() / "trainer" / "config"), version_base=None):
        return hydra_compose(config_name="sft_trainer_engine", overrides=overrides)


def test_sft_overrides_compose_over_verls_own_sft_config(tmp_path):
    cfg = compose_sft(sft_overrides("trainer.total_epochs=1", data_dir=tmp_path))
    assert cfg.data.train_files == str(outputs("retool_sft", tmp_path / "retool_sft")[0])
    assert cfg.trainer.total_epochs == 1  # the user's overrides come last and win
    assert cfg.model.path == catalog.get(RETOOL).card["model"]
    assert "hf_model" in cfg.checkpoint.save_contents  # the folder the RL recipe loads
    assert cfg.trainer.default_local_dir.endswith("runs/retool-qwen25-7b-v1-sft/checkpoints")
    assert cfg.data.max_token_len_per_gpu >= cfg.data.max_length == 16384


def test_sft_config_builds_verls_typed_configs():
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose_sft(sft_overrides())
    for section in ("engine", "optim", "checkpoint", "profiler"):
        omega_conf_to_dataclass(cfg[section])
    model = OmegaConf.create(OmegaConf.to_container(cfg.model))
    with open_dict(model):  # the committed config.json, without the hub tokenizer
        model.path, model.load_tokenizer = str(REPO / "models" / cfg.model.path), False
    assert omega_conf_to_dataclass(model).hf_config.model_type == "qwen2"


def test_sft_data_keys_match_the_rl_stage():
    cfg = compose_sft(sft_overrides())
    assert (cfg.data.messages_key, cfg.data.tools_key) == ("messages", "tools")  # what verl_recipes/data/retool_sft writes
    tool_config = Path(composed(RETOOL).actor_rollout_ref.rollout.multi_turn.tool_config_path)
    assert tool_config == CODE_INTERPRETER_CONFIG  # the file the SFT data takes its tool schema from


def test_a_wrong_sft_key_is_refused():
    with pytest.raises(Exception, match="Could not override 'data.multiturn.enable'"):
        compose_sft(sft_overrides("data.multiturn.enable=true"))  # fsdp_sft_trainer's key, gone in 0.9.1


def test_sft_runs_the_interpreter_make_uses(tmp_path):
    """sft.sh calls $VENV/bin/python (VENV default .venv), as the Makefile does, never a bare `python`."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stub = venv / "bin" / "python"
    stub.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'called'}\n")
    stub.chmod(0o755)
    (tmp_path / "data" / "retool_sft").mkdir(parents=True)
    (tmp_path / "data" / "retool_sft" / "train.parquet").touch()
    env = {**os.environ, "VENV": str(venv), "RL_DATA_DIR": str(tmp_path / "data"), "RL_RUNS_DIR": str(tmp_path / "runs")}
    env.pop("PY", None)
    subprocess.run(["bash", str(SFT_SCRIPT)], env=env, capture_output=True, text=True, check=True)
    assert (tmp_path / "called").read_text().startswith("-m torch.distributed.run --standalone")
