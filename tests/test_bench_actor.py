"""verl_recipes.bench.actor_update --cpu-dry-run: verl's real actor (TrainingWorker, FSDP2 on gloo) runs every arm of the
factor grid and the proxy on a tiny model, and the report says what the arms did (packing, micro-batches, log-prob
function, one loss)."""

import pytest
from conftest import run_dry

from verl_recipes.bench import actor_update


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    return run_dry(["-m", "verl_recipes.bench.actor_update", "--cpu-dry-run", "--profile"],
                   tmp_path_factory.mktemp("out"), "actor_update.json")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """The same dry run as two gloo ranks under torchrun, on the two arms the 7B two-GPU run compares."""
    return run_dry(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    "-m", "verl_recipes.bench.actor_update", "--cpu-dry-run", "--profile", "--arms", "verl_default,ours"],
                   tmp_path_factory.mktemp("out2"), "actor_update.json")


@pytest.mark.slow
def test_two_ranks_shard_verls_actor_and_train_as_one_rank_does(dry_run, two_ranks):
    """FSDP2 over both ranks, each on its share of the mini-batch: the first step's loss and gradient norm are the
    one-rank run's, every token entered the model once, and rank 0 alone reported."""
    stdout, result = two_ranks
    one_rank = dry_run[1]["arms"]
    assert result["conditions"]["world_size"] == 2 and result["settings"]["balance_batch"]
    assert dry_run[1]["conditions"]["world_size"] == 1 and not dry_run[1]["settings"]["balance_batch"]
    for name, arm in result["arms"].items():
        assert arm["data_parallel_size"] == 2, name
        assert arm["warmup_loss"] == pytest.approx(one_rank[name]["warmup_loss"], rel=1e-4), name
        assert arm["grad_norm"] == pytest.approx(one_rank[name]["grad_norm"], rel=1e-3), name
        assert arm["computed_tokens"] == one_rank[name]["computed_tokens"] == result["lengths"]["total_tokens"], name
        assert arm["profile"]["wall_s"] > 0, name  # rank 0's trace
    assert result["arms"]["verl_default"]["micro_batches"] == result["settings"]["num_seqs"] // 2  # 1 per rank
    assert result["arms"]["ours"]["micro_batches"] == 2  # one dynamic micro-batch on each rank
    assert result["checks"]["losses_agree"] and result["checks"]["packed_arms_stayed_packed"]
    assert stdout.count("actor update on 2 x cpu (dry run)") == 1


def test_each_rank_gets_its_share_of_the_mini_batch():
    """Two ranks' shares hold every sequence once, half each, and keep the whole mini-batch's size for verl's
    per-rank split of it."""
    from verl.utils import tensordict_utils as tu

    from verl_recipes.bench import lengths, verl_actor

    batch = lengths.sample(8, 32, 4, 16, 12, seed=0)
    shares = [verl_actor.ppo_mini_batch(batch.prompts, batch.responses, 512, rank=r, world_size=2) for r in (0, 1)]
    share_lengths = [share["input_ids"].offsets().diff().tolist() for share in shares]
    assert [len(share) for share in share_lengths] == [4, 4]
    assert sorted(share_lengths[0] + share_lengths[1]) == sorted(batch.totals.tolist())
    assert all(tu.get(share, "mini_batch_size") == 8 and not share.is_locked for share in shares)


@pytest.mark.slow
def test_every_arm_ran_through_verl_and_agreed_on_the_loss(dry_run):
    _, result = dry_run
    assert list(result["arms"]) == list(actor_update.ARMS)
    assert result["checks"]["losses_agree"] and result["checks"]["warmup_loss_relative_spread"] < 2e-2
    assert result["checks"]["chunked_arms_ran_chunked"]
    assert result["arms"]["dynamic_chunked"]["logprob_function"] == "verl_recipes.runtime.logprobs.logprobs_from_logits"
    assert result["arms"]["dynamic"]["logprob_function"] == "verl.utils.torch_functional.logprobs_from_logits"
    factors = result["factors"]
    assert set(factors) == {"fixed", "dynamic"} and all(set(row) == {"verl", "chunked", "fused"} for row in factors.values())
    assert "fallback loop" in result["conditions"]["verl_logprobs"]  # no flash-attn on the CI machine
    for arm in result["arms"].values():
        assert arm["tokens_per_s"] > 0 and 0 < arm["verl_mfu"] < 1
    assert set(result["versions"]) >= {"torch", "transformers", "verl"}
    assert result["ceilings"]["gemm_tflops"] > 0 and result["ceilings"]["copy_gbps"] > 0


@pytest.mark.slow
def test_packed_arms_stayed_packed_and_padded_arm_paid_for_padding(dry_run):
    _, result = dry_run
    arms, num_seqs = result["arms"], result["settings"]["num_seqs"]
    assert result["checks"]["packed_arms_stayed_packed"] and result["checks"]["padded_arm_saw_padding"]
    assert arms["verl_default"]["computed_over_valid"] == 1.0 == arms["ours"]["computed_over_valid"]
    assert arms["padded"]["computed_over_valid"] > 1.0
    fixed = [name for name, arm in actor_update.ARMS.items() if arm.batching == "fixed"]
    assert {arms[name]["micro_batches"] for name in fixed} == {num_seqs // 2}
    dynamic = [name for name in arms if name not in fixed]
    assert {arms[name]["micro_batches"] for name in dynamic} == {1}  # the whole dry-run mini-batch fits the budget


@pytest.mark.slow
def test_every_arm_profiled_one_step_through_verls_profiler_with_our_preset(dry_run):
    """verl's own torch profiler, set by configs/profiling/torch_rollout, wrote one train_batch trace per arm; the
    phases found their ranges (CPU only here: no GPU events, and the summary says so)."""
    stdout, result = dry_run
    assert result["settings"]["profile"] == actor_update.PROFILE_FRAGMENT
    for name, arm in result["arms"].items():
        profile, phases = arm["profile"], arm["profile"]["phases"]
        assert profile["wall_s"] > 0 and profile["gpu_events"] == 0 and "no GPU events" in profile["notes"][0]
        assert all(phases[phase]["ranges"] > 0 for phase in ("forward", "backward", "optimizer"))
        assert ("train_batch", 1) == tuple(profile["annotations"][0][:2])  # verl's stage range is the window
        calls_verl_logprobs = actor_update.ARMS[name].logprobs != "fused"  # fused kernels compute them in the model
        assert (phases["log-prob"]["ranges"] > 0) == calls_verl_logprobs, name
    assert "one profiled step per arm (configs/profiling/torch_rollout)" in stdout


@pytest.mark.slow
def test_proxy_fills_the_budget_and_goals_are_reported(dry_run):
    stdout, result = dry_run
    assert result["proxy"]["tokens"] == result["settings"]["token_budget"] and result["proxy"]["stayed_packed"]
    assert set(result["goals"]) == set(actor_update.GOALS)
    for goal in result["goals"].values():
        assert goal["held"] == (goal["value"] >= goal["target"])
    assert stdout.rstrip().splitlines()[-1].lstrip().startswith(list(actor_update.GOALS)[-1])


@pytest.mark.parametrize("budget", [384, 1000, 37568])
def test_proxy_lengths_fill_the_budget_exactly(budget):
    max_response = 32 if budget < 5000 else 4096
    proxy = actor_update.proxy_lengths(budget, max_response, min_prompt=4, max_prompt=16, median=12)
    assert int(proxy.totals.sum()) == budget
    assert (proxy.responses >= 1).all() and (proxy.prompts >= 1).all()


def test_arms_differ_only_in_the_settings_under_test():
    """(the dry run composes them with verl's Hydra config, which rejects unknown keys)"""
    overrides = {arm: set(actor_update.arm_overrides(arm, 128, 2, 37568)) for arm in actor_update.ARMS}
    assert overrides["dynamic_chunked"] == overrides["dynamic"]  # chunked log-probs are installed, not configured
    assert overrides["fixed_fused"] - overrides["verl_default"] == {"actor_rollout_ref.model.use_fused_kernels=True"}
    assert overrides["padded"] ^ overrides["verl_default"] == {
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.model.use_remove_padding=True",
    }
    assert overrides["ours"] - overrides["verl_default"] == {
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=37568",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=75136",
        "actor_rollout_ref.model.use_fused_kernels=True",
    }
    with pytest.raises(ValueError, match="arm must be one of"):
        actor_update.arm_overrides("fast", 128, 2, 37568)
