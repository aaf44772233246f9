"""The lever arms of the end-to-end bench (issue 43) on CPU: each is `ours` plus its fragment and nothing else, fits one
80 GiB GPU at the bench's 1.5B shape by the planner, says in its header whether it changes the math; and the GPU plan
that runs them beside `ours` (verl_recipes/bench/e2e_levers.py). `make bench-e2e DRY=1` proves every arm against
verl 0.9.1 (tests/test_bench_e2e.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_recipes.bench import e2e_arms, e2e_levers
from verl_recipes.catalog import REPO, hf_config
from verl_recipes.check.memory import memory_plan
from verl_recipes.compose import compose, flatten
from verl_recipes.planner import plan

# the bench's workload (e2e.py defaults) at the 1.5B shape: the planner finds the model under models/ by its hub id
MODEL, DATA = Path("Qwen/Qwen2.5-1.5B-Instruct"), [Path("/data/train.parquet"), Path("/data/test.parquet")]


def composed(arm: str):
    config = e2e_arms.config_of(arm, "qwen25-7b-grpo")
    return config, compose(config, e2e_arms.bench_args(arm, MODEL, DATA, steps=3, batch=64, mini_batch=16))


# the fast tier keeps one representative (issue 47): no_recompute, whose budget is there for the planner's sake
FAST = "ours_no_recompute"


@pytest.mark.parametrize("arm", [arm if arm == FAST else pytest.param(arm, marks=pytest.mark.slow)
                                 for arm in e2e_levers.LEVERS])
def test_a_lever_arm_is_ours_plus_its_fragment_and_fits_one_gpu(arm):
    settings = e2e_arms.ARMS[arm]
    fragment = REPO / f"{settings.fragment}.yaml"
    config, cfg = composed(arm)
    ours, lever = flatten(composed("ours")[1]), flatten(cfg)
    differing = {key for key in ours.keys() | lever.keys() if ours.get(key) != lever.get(key)}
    assert differing == set(flatten(OmegaConf.load(fragment)))
    plan = memory_plan(cfg, config)
    assert plan.fits and not plan.errors, plan.verdict
    header = fragment.read_text()
    assert ("CHANGES THE MATH" in header) == settings.changes_math


def test_the_levers_arm_is_ours_plus_every_lever_that_keeps_the_math_and_fits_one_gpu():
    keeps = [arm for arm in e2e_levers.LEVERS if not e2e_arms.ARMS[arm].changes_math]
    assert len(keeps) == 4 and "ours_levers" not in e2e_levers.LEVERS
    config, cfg = composed("ours_levers")
    ours, levers = flatten(composed("ours")[1]), flatten(cfg)
    for arm in keeps:  # each lever's values, as its own arm has them
        own = flatten(composed(arm)[1])
        assert {key: levers[key] for key in own if own[key] != ours.get(key)} == \
            {key: own[key] for key in own if own[key] != ours.get(key)}
    wanted = set().union(*(flatten(OmegaConf.load(REPO / f"{e2e_arms.ARMS[arm].fragment}.yaml")) for arm in keeps))
    assert {key for key in ours.keys() | levers.keys() if ours.get(key) != levers.get(key)} == wanted
    plan = memory_plan(cfg, config)
    assert plan.fits and not plan.errors, plan.verdict


def test_the_recipe_readme_says_for_every_lever_whether_it_keeps_the_math_and_when_it_applies():
    """Issue 43: each lever has a line in the recipe README; the math it states is its fragment header's."""
    text = (REPO / "recipes" / "qwen25-7b-grpo" / "README.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.split("## Speed levers", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("| `")}
    fragments = sorted((REPO / "configs" / "perf").glob("*.yaml"))
    assert {f"`+configs/perf={f.stem}`" for f in fragments} <= set(rows)
    for fragment in fragments:
        sets, math, measured, applies = rows[f"`+configs/perf={fragment.stem}`"]
        assert sets and measured and applies
        changes = "CHANGES THE MATH" in fragment.read_text()
        assert ("changes the math" in math) == changes and (math.startswith("preserved") != changes), fragment.stem


# the six levers: two waves of four GPUs, what one lease holds (bench/README.md); a seventh would take a third
SIX = e2e_levers.LEVERS


def test_levers_run_in_waves_each_with_ours_on_another_gpu():
    planned = e2e_levers.waves(SIX, gpus=4)
    assert [wave.count("ours") for wave in planned] == [1, 1] and [wave.index("ours") for wave in planned] == [0, 1]
    assert sorted(arm for wave in planned for arm in wave if arm != "ours") == sorted(SIX)
    assert len(SIX) == 6 and [len(wave) for wave in e2e_levers.waves([*SIX, "ours_bypass"], gpus=4)] == [4, 4, 2]
    laid = e2e_levers.jobs(planned, 4, Path("/tmp/levers"))
    assert laid[1] == ("1 w1.ours_no_recompute env OUT=/tmp/levers/w1 bash tests/gpu/bench_e2e.sh --arm ours_no_recompute "
                       "--work /tmp/side/w1.ours_no_recompute/e2e")
    assert [job.split()[0] for job in laid] == ["0", "1", "2", "3", "+0", "+1", "+2", "+3"]
    # one GPU: ours then a lever, one after the other
    assert e2e_levers.waves(["ours_no_recompute", "ours_bypass"], gpus=1) == [["ours", "ours_no_recompute"],
                                                                              ["ours", "ours_bypass"]]


def test_the_plan_takes_each_arm_s_committed_wall_time_and_refuses_what_seconds_do_not_fit(capsys):
    ours = e2e_levers.wall_s("ours")
    assert ours == 571.9 and e2e_levers.wall_s("ours_liger") == 514.2  # its run of 2026-11-28 (an arm since folded in)
    assert e2e_levers.wall_s("ours_bypass") == ours  # a lever that has not run: ours' time
    assert e2e_levers.wall_s("verl_example") == 615.8  # 1 x H100, 2026-12-07
    assert e2e_levers.busiest_gpu_s(e2e_levers.waves(SIX, 4), 4, stagger=15) == 2 * ours + 3 * 15
    assert e2e_levers.main(["1300", "--arms", ",".join(SIX), "--dry-run"]) == 0
    assert "~1189 s of 1300 s" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        e2e_levers.main(["1100", "--arms", ",".join(SIX), "--dry-run"])
    assert e2e_levers.main(["1300", "--dry-run"]) == 0  # every lever is SIX: the default plan fits a lease
    with pytest.raises(SystemExit):
        e2e_levers.main(["1300", "--arms", "colocated_2gpu", "--dry-run"])


def test_the_sglang_arm_is_ours_with_sglangs_rollout_fragment_for_vllms():
    rollout = REPO / "configs/rollout"
    ours, sglang = flatten(composed("ours")[1]), flatten(composed("ours_sglang")[1])
    differing = {key for key in ours.keys() | sglang.keys() if ours.get(key) != sglang.get(key)}
    swapped = set(flatten(OmegaConf.load(rollout / "vllm.yaml"))) | set(flatten(OmegaConf.load(rollout / "sglang.yaml")))
    # beyond the two fragments' keys: their parent dicts, and verl's keys that follow rollout.name (distillation's)
    extra = {key for key in differing - swapped
             if not any(k.startswith(key + ".") for k in swapped) and (ours.get(key), sglang.get(key)) != ("vllm", "sglang")}
    assert differing and not extra, extra
    assert sglang["actor_rollout_ref.rollout.name"] == "sglang" and "ours_sglang" not in e2e_levers.LEVERS
    # both plugins the run needs reach Ray's workers: the weights' names and the bench's lengths
    env = "ray_kwargs.ray_init.runtime_env.env_vars."
    assert sglang[env + "VERL_RECIPES_CHECKPOINT_NAMES"] == "1" and sglang[env + "VERL_RECIPES_FORCED_LENGTHS"] == "1"


def test_the_sglang_levers_arm_is_ours_sglang_plus_the_levers_that_paid_and_its_graphs_cover_its_batch():
    """ours_sglang_levers (the candidate defaults): ours_sglang and the three math-preserving levers that paid on vLLM,
    no_recompute left out; SGLang captures decode graphs up to the 512 sequences the lever lets run, and fits."""
    sglang, candidate = flatten(composed("ours_sglang")[1]), flatten(composed("ours_sglang_levers")[1])
    differing = {key: candidate.get(key) for key in sglang.keys() | candidate.keys() if sglang.get(key) != candidate.get(key)}
    kept = ["ours_logprob_budget", "ours_max_num_seqs", "ours_replay_poll"]
    wanted = set().union(*(flatten(OmegaConf.load(REPO / f"{e2e_arms.ARMS[arm].fragment}.yaml")) for arm in kept))
    graphs = "actor_rollout_ref.rollout.engine_kwargs.sglang.cuda_graph_max_bs"
    assert set(differing) == wanted | {graphs}
    assert differing[graphs] == differing["actor_rollout_ref.rollout.max_num_seqs"] == 512 and sglang[graphs] == 256
    assert "actor_rollout_ref.model.enable_gradient_checkpointing" not in differing
    config, cfg = composed("ours_sglang_levers")
    plan = memory_plan(cfg, config)
    assert plan.fits and not plan.errors, plan.verdict


def test_the_planner_sizes_sglangs_kv_cache_as_it_did_on_the_h100():
    """The cut SGLang arm of 2026-12-07 logged SGLang's own memory figures (bench/results/e2e_cut.*): the planner, on
    the arm's composed config and that card's memory, gives what the trainer held at SGLang's start and the KV cache
    SGLang took from it within 2%; at a higher fraction, AdamW's states (made at the first update) no longer fit."""
    import json

    measured = json.loads((REPO / "bench/results/e2e_cut.ours_sglang_levers.h100.2026-12-07.json").read_text())
    memory = measured["sglang_memory_gib"]
    config, cfg = composed("ours_sglang_levers")
    found = plan(cfg, hf_config(cfg.actor_rollout_ref.model.path), gpu_memory_gib=memory["gpu_total"])
    assert found.fits, found.verdict
    assert found.rollout.engine == "sglang"
    assert found.rollout.pool_gib == pytest.approx(memory["free_at_start"], rel=0.02)
    assert found.rollout.kv_capacity_tokens == pytest.approx(memory["kv_cache_tokens"], rel=0.02)
    # at 0.9 the states no longer fit beside SGLang's share and graphs: the verdict names the fraction that fits
    tight = plan(compose(config, [*e2e_arms.bench_args("ours_sglang_levers", MODEL, DATA, steps=3, batch=64,
                                                       mini_batch=16),
                                  "actor_rollout_ref.rollout.gpu_memory_utilization=0.9"]),
                 hf_config(cfg.actor_rollout_ref.model.path), gpu_memory_gib=memory["gpu_total"])
    assert not tight.fits and "next to the SGLang share" in tight.verdict
    assert "gpu_memory_utilization from 0.90 to <= 0.80" in tight.verdict


def test_in_order_runs_the_given_arms_one_after_another_on_one_gpu(capsys):
    assert e2e_levers.main(["1700", "--gpus", "1", "--in-order", "--arms", "verl_example,ours", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "# 2 arms on 1 GPU(s): ~1188 s of 1700 s" in printed  # 615.8 + 571.9, their longest committed walls
    jobs = [line for line in printed.splitlines() if not line.startswith("#")]
    assert [job.split()[:2] for job in jobs] == [["0", "w1.verl_example"], ["+0", "w1.ours"]]
    with pytest.raises(SystemExit):  # a third arm (ours_levers: 500 s on 2026-11-29) does not fit 1600 s
        e2e_levers.main(["1600", "--gpus", "1", "--in-order", "--arms", "verl_example,ours,ours_levers", "--dry-run"])


def test_the_device_script_reads_the_plan_with_the_kits_verl_layers(tmp_path):
    """tests/gpu/bench_levers.sh on the lent machine: its python has no omegaconf until the kit's env.sh puts verl's
    layers on PYTHONPATH; here a stand-in env.sh records that it was sourced."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/env.sh").write_text('echo "kit layers: $1" >&2\n')
    python = tmp_path / "py/python3"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    done = subprocess.run(["bash", str(REPO / "tests/gpu/bench_levers.sh"), "1200", "--gpus", "1", "--in-order",
                           "--arms", "verl_example,ours", "--dry-run"], capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{python.parent}:/usr/bin:/bin", "GPU_KIT": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "kit layers: verl" in done.stderr and "+0 w1.ours env OUT=/tmp/levers/w1" in done.stdout


def test_an_sglang_arm_runs_in_sglangs_layer_set_beside_vllm_arms(capsys):
    assert e2e_levers.main(["1700", "--gpus", "1", "--in-order", "--arms", "ours_sglang,verl_example,ours",
                            "--dry-run"]) == 0
    jobs = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert jobs[0] == ("0 w1.ours_sglang@none env OUT=/tmp/levers/w1 bash tests/gpu/with_sglang.sh bash "
                       "tests/gpu/bench_e2e.sh --arm ours_sglang --work /tmp/side/w1.ours_sglang/e2e")
    assert [job.split()[1] for job in jobs[1:]] == ["w1.verl_example", "w1.ours"]  # the kit's default set, all
    assert "with_sglang" not in " ".join(jobs[1:])


def test_the_sglang_wrapper_runs_its_command_with_sglangs_exports(tmp_path):
    """tests/gpu/with_sglang.sh with stand-in SGLang and kit layers: the command sees the SGLang set on PYTHONPATH."""
    sglang, kit = tmp_path / "sgl/root/layers", tmp_path / "gpu/root/layers"
    for folder in (sglang / "G", sglang / "Z", kit / "R"):
        folder.mkdir(parents=True)
    (sglang / "Z/MAP").write_text("")
    done = subprocess.run(["bash", str(REPO / "tests/gpu/with_sglang.sh"), "sh", "-c", 'echo "$PYTHONPATH"'],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "SGLANG_HOME": str(tmp_path / "sgl"), "GPU_KIT": str(tmp_path / "gpu")})
    assert done.returncode == 0, done.stderr
    assert f"{sglang}/G:{kit}/T:{kit}/R" in done.stdout
