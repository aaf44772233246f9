"""`make <recipe>-node` on the CPU: each of issue 44's recipes composed at G = 4 and 8 and proven as `make check`
proves a recipe, its batch scaled so every per-GPU quantity stays, every override recorded with its reason, the
planner's peak filled in; the prompts of the task's length; the record and every gate on fake metrics and logs, each
gate shown to fail; and the runtime plugins that measure a run (per-phase allocator peaks, vLLM preemptions)."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from verl_recipes import catalog
from verl_recipes.catalog import RecipeError
from verl_recipes.check.gates import AGREEMENT, COMMON
from verl_recipes.compose import compose, flatten
from verl_recipes.node import config as node_config
from verl_recipes.node import gates, inputs, record, run_log
from verl_recipes.node.config import compose_node
from verl_recipes.node.overrides import GLOBAL_COUNTS, literal
from verl_recipes.runtime import phase_memory, vllm_preemptions

# issue 44's recipes, as named under recipes/ (all seven exist; qwen25-7b-grpo with its megatron variant)
ISSUE_44 = ["qwen25-7b-grpo", "qwen25-7b-grpo:megatron", "qwen25-vl-7b-geo3k-dapo", "qwen3-vl-8b-geo3k-dapo",
            "retool-qwen25-7b", "deepeyes-qwen25-vl-7b", "qwen3-30b-a3b-grpo", "qwen3-vl-30b-a3b-geo3k-dapo"]
# the planner's machine at G = 4 (issue 44: H100s where it fits 80 GiB, else H200s); at G = 8 every one fits H100s
MACHINE_AT_4 = {"qwen25-7b-grpo": "h200", "qwen25-7b-grpo:megatron": "h100", "qwen25-vl-7b-geo3k-dapo": "h200",
                "qwen3-vl-8b-geo3k-dapo": "h200", "retool-qwen25-7b": "h200", "deepeyes-qwen25-vl-7b": "h200",
                "qwen3-30b-a3b-grpo": "h200", "qwen3-vl-30b-a3b-geo3k-dapo": "h100"}
EP = "actor_rollout_ref.actor.megatron.expert_model_parallel_size"


@pytest.fixture(scope="module")
def node4():
    return compose_node(catalog.parse("qwen25-7b-grpo"), 4)


def test_issue_44_recipes_exist():
    assert {spec.split(":")[0] for spec in ISSUE_44} <= set(catalog.names())
    assert "megatron" in catalog.variants("qwen25-7b-grpo", "v1")


# ---------------------------------------------------------------- composition


def changed_keys(recipe, base, node) -> set[str]:
    """Keys whose composed value differs from the recipe's, less those the node config derives from others."""
    ours, theirs = flatten(base), flatten(node.cfg)
    written = flatten(compose(recipe, node.args(), resolve=False))
    return {key for key in ours.keys() | theirs.keys() if ours.get(key, "<absent>") != theirs.get(key, "<absent>")
            and not (isinstance(written.get(key), str) and "${" in written[key])}


@pytest.mark.slow
@pytest.mark.parametrize("gpus", [4, 8])
@pytest.mark.parametrize("spec", ISSUE_44)
def test_node_config_is_proven_scaled_and_planned(spec, gpus):
    from verl_recipes.check.preflight import fallback_overrides
    from verl_recipes.check.recipe import check

    recipe = catalog.parse(spec)
    node = compose_node(recipe, gpus)
    # proven as make check proves a recipe, on the machine's GPU memory: at G = 4 as the lent machines launch it (no
    # flash-attn, no apex: the launcher's fallbacks), at G = 8 as composed
    fallbacks = [override for override, _ in fallback_overrides(node.cfg, lambda module: False)] if gpus == 4 else []
    assert check(node.on_machine, [*node.args(), *fallbacks]) == []
    # the global batch scales by G/8, so each GPU's share stays; nothing but the recorded overrides changes
    base = node.base
    for key in ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size"):
        assert OmegaConf.select(node.cfg, key) * 8 == OmegaConf.select(base, key) * gpus, key
    overridden = {override.key for override in node.overrides()}
    # an override under an empty block (engine_kwargs.vllm: {}) changes that block's leaf too
    assert {key for key in changed_keys(recipe, base, node)
            if not any(o == key or o.startswith(f"{key}.") for o in overridden)} == set()
    assert all(override.why for override in node.overrides())
    # planned on the machine the issue's rule picks, at the real depth
    assert node.plan.fits and node.plan.allocated_gib > 0 and node.layers is None
    assert node.machine.kind == f"nvidia-{MACHINE_AT_4[spec] if gpus == 4 else 'h100'}-x{gpus}", node.machine.why
    if gpus == 8:  # the recipe's own node: nothing scales, no layout changes
        assert not overridden & {*GLOBAL_COUNTS, EP, "actor_rollout_ref.rollout.data_parallel_size"}


@pytest.mark.slow
def test_the_moe_recipes_record_their_layout_at_4_gpus():
    moe = compose_node(catalog.parse("qwen3-30b-a3b-grpo"), 4)
    overrides = {o.key: o for o in moe.overrides()}
    assert overrides[EP].value == 2 and "PP 2" in overrides[EP].why
    assert overrides["actor_rollout_ref.rollout.data_parallel_size"].value == 2
    assert overrides["actor_rollout_ref.rollout.expert_parallel_size"].value == 4  # experts over all four GPUs
    megatron = moe.cfg.actor_rollout_ref.actor.megatron
    assert (megatron.pipeline_model_parallel_size, megatron.virtual_pipeline_model_parallel_size) == (2, 2)
    vl = compose_node(catalog.parse("qwen3-vl-30b-a3b-geo3k-dapo"), 4)
    assert {o.key: o.value for o in vl.overrides()}[EP] == 4


@pytest.mark.slow
def test_a_count_that_does_not_scale_names_its_key():
    with pytest.raises(RecipeError, match="'data.train_batch_size' = 12 does not scale to 3 GPUs"):
        compose_node(catalog.parse("qwen25-7b-grpo"), 3, "data.train_batch_size=12")


def test_overrides_are_written_in_hydras_grammar(node4):
    args = node4.args("/models/q 7b")
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_RECIPES_FORCED_LENGTHS='1'" in args  # a key verl lacks
    assert "reward.custom_reward_function.path='pkg://verl_recipes.rewards.coin'" in args
    assert "actor_rollout_ref.model.path='/models/q 7b'" in args
    assert literal(False) == "false" and literal(None) == "null" and literal("it's") == "'it\\'s'"
    # the user's ARGS change the recipe first; the overrides then scale what they set
    node = compose_node(catalog.parse("qwen25-7b-grpo"), 4, "data.train_batch_size=64")
    assert node.cfg.data.train_batch_size == 32 and node.args()[0] == "data.train_batch_size=64"


@pytest.mark.slow
def test_fewer_layers_where_even_the_larger_machine_cannot_hold_the_shape(monkeypatch):
    """With cards too small for 48 layers, the real width keeps as many layers as fit, in whole PP x VPP chunks."""
    node = compose_node(catalog.parse("qwen3-30b-a3b-grpo"), 4)
    monkeypatch.setitem(node_config.GPU_MEMORY_GIB, "h100", 40.0)
    monkeypatch.setitem(node_config.GPU_MEMORY_GIB, "h200", 60.0)
    machine, layers = node_config.fit(node.cfg, catalog.hf_config(node.hub_id), 4)
    assert machine.kind == "nvidia-h200-x4" and layers is not None and layers < 48 and layers % 4 == 0
    assert f"{layers} layers of the real width fit" in machine.why
    shape = node_config.with_layers(catalog.hf_config("Qwen/Qwen3-VL-8B-Instruct"), 8)
    assert shape["text_config"]["num_hidden_layers"] == 8


# ---------------------------------------------------------------- prompts


@pytest.mark.slow
def test_prompts_fill_the_length_the_filter_keeps_and_vision_rows_carry_an_image(tmp_path):
    """With a length filter of plain characters (a prompt's text of at most 700), every row is as long as it keeps;
    a geo3k row carries one image of the planned size; train holds a batch for each step and for each batch DAPO's
    filter keeps in flight, the other files OTHER_ROWS."""
    from io import BytesIO

    from PIL import Image

    cfg = compose_node(catalog.parse("qwen25-vl-7b-geo3k-dapo"), 4, "data.train_batch_size=16 data.max_prompt_length=256").cfg

    def kept(rows):
        return [len(row["prompt"][0]["content"]) <= 700 for row in rows]

    files = inputs.write_prompts(cfg, ["geo3k"], tmp_path, kept=kept)
    assert [path.name for path in files] == ["train.parquet", "test.parquet"]
    train = pd.read_parquet(files[0])
    assert len(train) == 8 * (3 + 3) and len(pd.read_parquet(files[1])) == inputs.OTHER_ROWS
    assert {len(prompt[0]["content"]) for prompt in train["prompt"]} == {700}
    assert len(set(train["prompt"].map(lambda prompt: prompt[0]["content"]))) == len(train)  # no two alike
    images = train.iloc[0]["images"]
    assert len(images) == 1 and Image.open(BytesIO(images[0]["bytes"])).size == inputs.image_size(cfg)


def test_fit_chars_finds_the_longest_kept_filler():
    def make(chars):
        return {"text": "x" * chars}

    assert inputs.fit_chars(make, lambda rows: [len(r["text"]) <= 4321 for r in rows], limit=65536) == 4321
    assert inputs.fit_chars(make, lambda rows: [True for _ in rows], limit=100) == 100
    with pytest.raises(RecipeError, match="no filler is already longer"):
        inputs.fit_chars(make, lambda rows: [False for _ in rows], limit=100)


def test_image_size_keeps_the_pixel_budget_or_half_the_prompt():
    def data(**values):
        return OmegaConf.create({"data": values})

    # geo3k: configs/vision/one_image's max_pixels, 401,408 px, exactly; DeepEyes sets none: half of its 8192 tokens
    assert inputs.image_size(data(max_prompt_length=1024, mm_processor_kwargs={"max_pixels": 401408})) == (896, 448)
    width, height = inputs.image_size(data(max_prompt_length=8192))
    assert width * height <= 0.5 * 8192 * 28 * 28 and height % 224 == 0 and width == 2 * height


@pytest.mark.slow
def test_prompts_are_exactly_as_long_as_verls_own_filter_keeps(tmp_path):
    """The real path: the model's tokenizer (random_models, no weights: one ASCII character, one token), verl's dataset
    class as the trainer builds it, and ReTool's tool schemas counted in every prompt."""
    import yaml
    from transformers import AutoTokenizer

    from verl_recipes.random_models import build

    recipe = catalog.parse("retool-qwen25-7b")
    node = compose_node(recipe, 4, "data.train_batch_size=16 data.max_prompt_length=1024")
    model = build(tmp_path / "model", node.hub_id, weights=False)
    cfg = compose(recipe, node.args(str(model)))
    files = inputs.write_prompts(cfg, ["dapo_math_retool"], tmp_path / "data")
    train = pd.read_parquet(files[0])
    assert len(train) == 8 * (3 + 1) and set(train["agent_name"]) == {"tool_agent"}
    tokenizer = AutoTokenizer.from_pretrained(model)
    tools = [tool["tool_schema"] for tool in yaml.safe_load(Path(cfg.data.tool_config_path).read_text())["tools"]]
    lengths = {len(tokenizer.apply_chat_template(list(prompt), tools=tools, add_generation_prompt=True,
                                                 tokenize=True, return_dict=False)) for prompt in train["prompt"]}
    assert lengths == {1024}


# ---------------------------------------------------------------- record and gates

KV_LOG = ("(vLLMHttpServer pid=11) [verl_recipes] vLLM preemptions: counting in pid 11\n"
          "(vLLMHttpServer pid=11) INFO kv_cache_utils.py:1 GPU KV cache size: 1,433,600 tokens\n"
          "(vLLMHttpServer pid=11) INFO kv_cache_utils.py:2 Maximum concurrency for 3,072 tokens per request: 466.67x\n"
          "(vLLMHttpServer pid=12) INFO GPU KV cache size: 1,400,000 tokens, Maximum concurrency for 3,072 tokens per "
          "request: 455.73x\n")
PASSING_STEP = {**{metric: 1.0 for metric in COMMON["present"]}, "actor/pg_loss": 0.1, "actor/grad_norm": 0.5,
                "response_length/mean": 2048.0, "perf/throughput": 3000.0, "perf/mfu/actor": 0.31,
                "timing_s/update_actor": 90.0, "timing_s/step": 300.0,
                **{metric: (bound / 2 if side == "max" else 0.999) for metric, bound, side in AGREEMENT}}


def launch_dir(tmp_path: Path, steps: dict[int, dict], log: str, args: list[str] = ()) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "launch.json").write_text(json.dumps({"args": list(args)}))
    with open(tmp_path / "metrics.jsonl", "w") as out:
        for step, data in steps.items():
            out.write(json.dumps({"step": step, "data": data}) + "\n")
    (tmp_path / "verl.log").write_text(log)
    return tmp_path


def built(node, tmp_path, steps=None, log=KV_LOG, phases=None, rc=0, args=()) -> dict:
    planned = node.plan.allocated_gib
    phases = {"update_actor": {"peak_gib": planned * 1.02, "device_used_gib": 70.0, "calls": 12},
              "weight_push": {"peak_gib": 30.0, "device_used_gib": 120.0, "calls": 12}} if phases is None else phases
    steps = {n: dict(PASSING_STEP) for n in (1, 2, 3)} if steps is None else steps
    return record.build(node, "/models/q", node.cfg, node.plan, rc, launch_dir(tmp_path, steps, log, args), phases,
                        "4xh200", 900.0)


def test_a_passing_run_fills_the_record(node4, tmp_path):
    result = built(node4, tmp_path, args=[*node4.args("/models/q"), "+configs/attention=torch_varlen"])
    assert result["passed"] and result["failures"] == []
    assert result["peak_memory_gib"] == pytest.approx(node4.plan.allocated_gib * 1.02)
    assert result["planned_peak_gib"] == node4.plan.allocated_gib and result["peak_error"] == pytest.approx(0.02)
    assert result["rollout"]["kv_cache_tokens"] == [1433600, 1400000]
    assert result["rollout"]["kv_capacity_sequences"] == 1400000 // 3072
    assert result["rollout"]["max_concurrency"] == [466.67, 455.73] and result["rollout"]["preemptions"] == 0
    assert result["tokens_per_s"] == 4 * 3000.0 and result["mfu"] == {"actor": 0.31} and result["step_s"] == 300.0
    assert set(result["agreement"]) == {metric for metric, _, _ in AGREEMENT}
    assert (result["shape"], result["gpus"], result["steps"], result["layers"]) == ("Qwen/Qwen2.5-7B-Instruct", 4, 3, None)
    assert result["machine"]["kind"] == "nvidia-h200-x4" and result["hardware"] == "4xh200"
    assert {"key": "actor_rollout_ref.model.path", "value": "/models/q", "why": node4.overrides()[2].why} in \
        result["overrides"]
    assert [o["key"] for o in result["overrides"] if o["value"] is None] == ["+configs/attention=torch_varlen"]
    assert record.name("qwen25-7b-grpo", "megatron", "4xh100") == "qwen25-7b-grpo-megatron.4xh100"


def test_each_gate_fails_on_a_run_that_breaks_it(node4, tmp_path):
    sequences = 3 * 512 * 5
    oom = built(node4, tmp_path / "oom", log=KV_LOG + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate\n")
    assert any(f.startswith("out of memory:") for f in oom["failures"])
    storm = KV_LOG + vllm_preemptions.LINE.format(engine=0, pid=11, total=sequences // 10 + 1) + "\n"
    assert any("preemption storm" in f for f in built(node4, tmp_path / "storm", log=storm)["failures"])
    drifted = {n: {**PASSING_STEP, "training/rollout_probs_diff_mean": 0.05} for n in (1, 2, 3)}
    assert any("training/rollout_probs_diff_mean" in f for f in built(node4, tmp_path / "agree", drifted)["failures"])
    planned = node4.plan.allocated_gib
    for factor in (1.15, 0.85):  # either way off the plan
        phases = {"update_actor": {"peak_gib": planned * factor, "device_used_gib": 70.0, "calls": 3}}
        assert any("off the planner's" in f for f in built(node4, tmp_path / f"peak{factor}", phases=phases)["failures"])
    assert any("no per-phase allocator peak" in f for f in built(node4, tmp_path / "none", phases={})["failures"])
    uncounted = built(node4, tmp_path / "uncounted", log=KV_LOG.split("\n", 1)[1])
    assert uncounted["rollout"]["preemptions"] is None and any("not counted" in f for f in uncounted["failures"])
    crashed = built(node4, tmp_path / "crash", steps={1: PASSING_STEP}, rc=1)["failures"]
    assert "verl exited with 1" in crashed and any("steps [2, 3] have no metrics" in f for f in crashed)


def test_gate_bounds_sit_where_the_issue_puts_them():
    assert gates.peak_failures(110.0, 100.0) == [] and gates.peak_failures(90.0, 100.0) == []
    assert gates.peak_failures(110.5, 100.0) and gates.peak_failures(89.5, 100.0)
    assert gates.preemption_failures(100, 1000) == [] and gates.preemption_failures(101, 1000)
    assert len(gates.oom_failures(["a"] * 5)) == 4  # three lines and the count of the rest


def test_the_log_reader_finds_vllms_kv_lines_and_memory_errors():
    assert run_log.kv_cache_tokens(KV_LOG) == [1433600, 1400000]
    log = "NCCL WARN Cuda failure 'out of memory'\nValueError: No available memory for the cache blocks.\nfine\n"
    assert len(run_log.oom_lines(log)) == 2


# ---------------------------------------------------------------- runtime plugins


class FakeCuda:
    def __init__(self):
        self.peak, self.resets = 0.0, 0

    def reset_peak_memory_stats(self):
        self.resets += 1
        self.peak = 0.0

    def max_memory_allocated(self):
        return self.peak

    def mem_get_info(self):
        return 10 * 2**30, 80 * 2**30


def test_phase_memory_records_each_phase_and_keeps_verls_dispatch(tmp_path, monkeypatch):
    from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, register

    cuda = FakeCuda()

    class Worker:
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def update_actor(self, data):
            cuda.peak = 40 * 2**30
            return data

        @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
        async def update_weights(self):
            cuda.peak = 20 * 2**30

        compute_log_prob = compute_ref_log_prob = update_actor

    monkeypatch.setattr(phase_memory, "_cuda", lambda: cuda)
    monkeypatch.setenv("RANK", "3")
    phase_memory.patch(types.SimpleNamespace(ActorRolloutRefWorker=Worker), tmp_path)
    phase_memory.patch(types.SimpleNamespace(ActorRolloutRefWorker=Worker), tmp_path)  # twice: wrapped once
    assert getattr(Worker.update_actor, MAGIC_ATTR)["dispatch_mode"] == Dispatch.ONE_TO_ALL
    assert inspect.iscoroutinefunction(Worker.update_weights)
    worker = Worker()
    assert worker.update_actor("batch") == "batch"
    asyncio.run(worker.update_weights())
    assert cuda.resets == 2
    phases = phase_memory.read(tmp_path)
    assert phases["update_actor"] == {"peak_gib": 40.0, "device_used_gib": 70.0, "calls": 1}
    assert phases["weight_push"]["peak_gib"] == 20.0 and next(tmp_path.glob("rank3.*.jsonl"))


def test_preemptions_are_counted_per_engine_and_summed(capsys):
    IterationStats = type("IterationStats", (), {})  # noqa: N806 (vLLM's class name is how it is found)

    class LoggingStatLogger:
        engine_index = 1

        def record(self, scheduler_stats, iteration_stats, engine_idx=0):
            self.seen = iteration_stats

    vllm_preemptions.patch(types.SimpleNamespace(LoggingStatLogger=LoggingStatLogger))
    vllm_preemptions.patch(types.SimpleNamespace(__name__="vllm.v1.metrics.loggers"))  # a vLLM without the class
    logger = LoggingStatLogger()
    for preempted in (0, 3, 0, 2):
        stats = IterationStats()
        stats.num_preempted_reqs = preempted
        logger.record(None, stats)
    lines = capsys.readouterr().out
    assert lines.count("total") == 2 and "not counted: vllm.v1.metrics.loggers has no" in lines
    assert logger.seen is stats
    other = vllm_preemptions.LINE.format(engine=0, pid=99, total=4)
    assert vllm_preemptions.total(lines + other + "\n") == 5 + 4
    assert vllm_preemptions.total(other) is None  # counts without the patch's word that it counted: not trusted


@pytest.mark.slow
def test_verls_worker_has_the_phases_the_plugin_wraps():
    from verl.workers.engine_workers import ActorRolloutRefWorker

    for method in phase_memory.PHASES:
        assert inspect.iscoroutinefunction(getattr(ActorRolloutRefWorker, method)) == (method == "update_weights")


def test_launch_keeps_verls_output_in_the_launch_folder(tmp_path):
    from verl_recipes import supervisor
    from verl_recipes.launch import VERL_LOG

    rc = supervisor.run([sys.executable, "-c", "import sys; print('GPU KV cache size: 5 tokens'); sys.exit(3)"],
                        tmp_path, dict(os.environ), log=tmp_path / VERL_LOG)
    assert rc == 3 and "GPU KV cache size: 5 tokens" in (tmp_path / VERL_LOG).read_text()


def test_coin_reward_varies_within_a_group():
    from verl_recipes.rewards.coin import compute_score

    scores = [compute_score("x", f"response {i}", "0")["acc"] for i in range(64)]
    assert 0.3 < sum(scores) / len(scores) < 0.7
    assert compute_score("x", "same", "0") == compute_score("y", "same", "1")


@pytest.mark.slow
def test_the_dry_run_proves_and_prints_the_plan(capsys):
    from verl_recipes import cli

    assert cli.main(["node", "qwen3-vl-30b-a3b-geo3k-dapo", "--gpus", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "machine: nvidia-h100-x4" in out and f"{EP} = 4" in out and out.count("[node] ok:") == 2


@pytest.mark.slow
def test_on_two_gpus_the_7b_keeps_the_layers_that_leave_headroom_and_its_dry_run_proves_that_shape(capsys):
    """2 x H200 holds 24 of Qwen2.5-7B's layers with 1.6 GiB to spare in the rollout phase, under HEADROOM_GIB: the
    run takes 23 (the first 7B run planned 25 layers at 138.95 of 139 GiB and ran out of memory waking vLLM). The
    proof runs on that depth, not on the hub's 28 layers, which do not fit."""
    from verl_recipes import cli

    node = compose_node(catalog.parse("qwen25-7b-grpo"), 2)
    assert node.layers == 23 and node.machine.kind == "nvidia-h200-x2"
    shape = catalog.hf_config(node.hub_id)
    fits_tight = node_config.plan(node.cfg, node_config.with_layers(shape, 24), node_config.GPU_MEMORY_GIB["h200"])
    assert fits_tight.fits and not node_config.roomy(fits_tight, node_config.GPU_MEMORY_GIB["h200"])
    assert "within the 2 GiB headroom" in node_config.verdict(fits_tight, node_config.GPU_MEMORY_GIB["h200"])
    assert cli.main(["node", "qwen25-7b-grpo", "--gpus", "2", "--dry-run"]) == 0
    assert capsys.readouterr().out.count("[node] ok:") == 2


def test_the_record_keeps_the_users_args(tmp_path):
    """A node run with ARGS (a smaller batch) says so: its counts are scaled from the user's values, not the card's."""
    node = compose_node(catalog.parse("qwen25-7b-grpo"), 4, "data.train_batch_size=128")
    result = built(node, tmp_path)
    assert result["args"] == ["data.train_batch_size=128"]
    assert next(o for o in result["overrides"] if o["key"] == "data.train_batch_size")["value"] == 128 * 4 // 8


def test_the_runner_asks_the_gpu_in_a_child_process_and_its_errors_come_back():
    """The runner keeps no CUDA context of its own through the run (the first 7B run's 0.6 GiB on GPU 0 was its)."""
    from verl_recipes.node import run

    with pytest.raises(RecipeError, match="no CUDA GPU here"):
        run.in_child(run.node_hardware, 2)
    assert "torch" not in sys.modules or not sys.modules["torch"].cuda.is_initialized()
