"""Profiling presets (configs/profiling/), the overrides of `make <recipe>-profile` (verl_recipes.perf.profile_args)
and the profiling preflight (verl_recipes.check.preflight), proven on qwen25-7b-grpo against the installed verl."""

import copy
import os
import shlex
import stat
import sys

import pytest
import torch.profiler
from omegaconf import OmegaConf, open_dict

from verl_recipes import catalog
from verl_recipes.check import preflight
from verl_recipes.check.preflight import profiling_preflight
from verl_recipes.check.recipe import check
from verl_recipes.compose import compose, split_args
from verl_recipes.perf import profile_args
from verl_recipes.perf.profile_args import CAPTURE_RANGE_END, PRESETS, nsys_capture_ranges

RECIPE = "qwen25-7b-grpo"
ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref", "critic")


@pytest.fixture(scope="module")
def recipe():
    return catalog.get(RECIPE)


@pytest.fixture(scope="module")
def base_cfg(recipe):
    """The recipe as `make <recipe>-profile` composes it before the preset: what profile_args counts from."""
    return compose(recipe)


@pytest.fixture(scope="module")
def profiled(recipe, base_cfg):
    """Each preset as the Makefile target composes it, with STEPS=[2,6] RANKS=[0,4]."""
    return {p: compose(recipe, profile_args.profile_args("[2,6]", "[0,4]", p, base_cfg)) for p in PRESETS}


# ---------------------------------------------------------------- the fragments


def test_presets_table_lists_every_fragment():
    files = {p.stem for p in (catalog.root() / "configs" / "profiling").glob("*.yaml")}
    assert files == set(PRESETS) | {"common"}


@pytest.mark.slow
@pytest.mark.parametrize("fragment", [*PRESETS, "common"])
def test_fragment_passes_make_check(recipe, fragment):
    assert check(recipe, [f"+configs/profiling={fragment}"]) == []


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_sets_its_tool_and_every_role_follows_steps_and_ranks(profiled, preset):
    cfg = profiled[preset]
    tool, discrete = PRESETS[preset]
    assert cfg.global_profiler.tool == tool
    assert cfg.global_profiler.global_tool_config.nsys.discrete is discrete
    assert list(cfg.global_profiler.steps) == [2, 6]
    assert cfg.trainer.total_training_steps == 6
    assert (cfg.trainer.save_freq, cfg.trainer.test_freq, cfg.trainer.val_before_train) == (-1, -1, False)
    for role in ROLES:
        node = OmegaConf.select(cfg, f"{role}.profiler")
        assert (node.tool, node.enable, node.all_ranks, list(node.ranks)) == (tool, True, False, [0, 4]), role
        assert node.save_path == "profile" and node.relocate_results is True, role
    assert preflight.config_problems(cfg) == []


@pytest.mark.slow
def test_nsys_presets_count_capture_ranges_for_the_recipe(profiled):
    worker = lambda p: profiled[p].global_profiler.global_tool_config.nsys.worker_nsight_options  # noqa: E731
    assert worker("nsys_step")["capture-range-end"] == "repeat-shutdown:2"  # one range per step
    # GRPO with a KL-loss reference: old log-prob, reference log-prob and update per step
    assert worker("nsys_discrete")["capture-range-end"] == "repeat-shutdown:6"
    assert worker("nsys_step")["cuda-memory-usage"] == "false" and worker("nsys_step")["sample"] == "none"


@pytest.mark.slow
def test_torch_rollout_makes_the_rollout_server_profile(profiled):
    """The exact condition of verl's vLLMHttpServer._should_profile, on verl's own rollout profiler builder:
    ranks are global GPU ranks, mapped to the replica (tensor_model_parallel_size GPUs) that owns them."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.profiler import ProfilerConfig
    from verl.utils.profiler.profile import build_rollout_dist_profiler

    rollout = profiled["torch_rollout"].actor_rollout_ref.rollout
    config = omega_conf_to_dataclass(rollout.profiler, dataclass_type=ProfilerConfig)
    tool_config = omega_conf_to_dataclass(rollout.profiler.tool_config.torch)
    width = rollout.tensor_model_parallel_size
    profiling = []
    for replica in range(8 // width):
        server = build_rollout_dist_profiler(replica, width, config=config, tool_config=tool_config)
        if server.check_enable() and server.check_this_rank() and server.is_discrete_mode():
            profiling.append(replica)
    assert profiling == sorted({0 // width, 4 // width})
    assert (tool_config.profile_token_start, tool_config.profile_token_end) == (0, 64)


@pytest.mark.slow
def test_torch_rollout_gives_reference_and_critic_the_actors_torch_settings(profiled):
    cfg = profiled["torch_rollout"]
    actor = OmegaConf.to_container(cfg.actor_rollout_ref.actor.profiler.tool_config.torch)
    assert actor["contents"] == ["cuda"] and actor["discrete"] is True and actor["schedule"]["active"] == 1
    assert OmegaConf.to_container(cfg.actor_rollout_ref.ref.profiler.tool_config.torch) == actor
    assert OmegaConf.to_container(cfg.critic.profiler.tool_config.torch) == actor


def test_nsys_trace_with_commas_needs_quotes_in_args(recipe):
    key = "global_profiler.global_tool_config.nsys.worker_nsight_options.trace"
    quoted = split_args(f"+configs/profiling=nsys_step '{key}=\"cuda,nvtx,osrt\"'")
    assert compose(recipe, quoted).global_profiler.global_tool_config.nsys.worker_nsight_options.trace == "cuda,nvtx,osrt"
    assert check(recipe, ["+configs/profiling=nsys_step", f"{key}=cuda,nvtx,osrt"]) != []


# ---------------------------------------------------------------- profile_args


def test_profile_args_nsys_step():
    assert profile_args.profile_args("[2,6]", "[0,4]", "nsys_step") == [
        "+configs/profiling=nsys_step",
        "global_profiler.steps=[2,6]",
        "trainer.total_training_steps=6",
        "actor_rollout_ref.actor.profiler.all_ranks=false",
        "actor_rollout_ref.actor.profiler.ranks=[0,4]",
        f"{CAPTURE_RANGE_END}=repeat-shutdown:2",
    ]


@pytest.mark.parametrize("steps, ranks, preset, expected", [
    ("6, 2,2", "all", "nsys_discrete", ["global_profiler.steps=[2,6]", "actor_rollout_ref.actor.profiler.all_ranks=true",
                                        "actor_rollout_ref.actor.profiler.ranks=[]",
                                        f"{CAPTURE_RANGE_END}=repeat-shutdown:6"]),
    ("3", "[8, 0]", "torch_rollout", ["global_profiler.steps=[3]", "trainer.total_training_steps=3",
                                      "actor_rollout_ref.actor.profiler.ranks=[0,8]"]),
    ("[1,2,3]", "[0]", "torch_memory", ["+configs/profiling=torch_memory", "global_profiler.steps=[1,2,3]"]),
])
def test_profile_args_reads_short_lists(steps, ranks, preset, expected):
    out = profile_args.profile_args(steps, ranks, preset)
    assert set(expected) <= set(out)
    assert any(a.startswith(CAPTURE_RANGE_END) for a in out) == (PRESETS[preset][0] == "nsys")


@pytest.mark.parametrize("steps, ranks, preset, message", [
    ("[0,1]", "[0]", "nsys_step", "STEPS='[0,1]'"),
    ("[a]", "[0]", "nsys_step", "STEPS='[a]'"),
    ("[]", "[0]", "nsys_step", "STEPS='[]'"),
    ("[2]", "[-1]", "nsys_step", "RANKS='[-1]'"),
    ("[2]", "[0]", "nsys", "PRESET='nsys' is not a profiling preset; choose one of nsys_step"),
])
def test_profile_args_rejects_bad_input(steps, ranks, preset, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        profile_args.profile_args(steps, ranks, preset)


def _with(cfg, **dotted):
    out = copy.deepcopy(cfg)
    with open_dict(out):
        for key, value in dotted.items():
            OmegaConf.update(out, key.replace("__", "."), value)
    return out


def test_discrete_ranges_follow_the_recipe(base_cfg):
    count = lambda cfg, steps: nsys_capture_ranges(cfg, steps, discrete=True)  # noqa: E731
    assert count(base_cfg, [2, 6]) == 6  # reference (KL loss): 3 per step
    no_ref = _with(base_cfg, actor_rollout_ref__actor__use_kl_loss=False)
    assert count(no_ref, [2, 6]) == 4
    warmup = _with(base_cfg, trainer__critic_warmup=3)  # no actor update before step 3
    assert count(warmup, [2, 3]) == 2 + 3
    # PPO: the colocated critic's train_batch runs once per critic mini-batch and epoch (1024 / 256 x 2)
    ppo = _with(base_cfg, algorithm__adv_estimator="gae", critic__enable=True, critic__ppo_mini_batch_size=256,
                critic__ppo_epochs=2)
    assert count(ppo, [2]) == 3 + 8
    assert nsys_capture_ranges(None, [2, 6], discrete=True) == 6  # no recipe: GRPO/PPO with a reference
    assert nsys_capture_ranges(None, [2, 3, 5], discrete=False) == 3
    assert nsys_capture_ranges(None, [2, 3, 5], discrete=False, continuous=True) == 2  # [2-3] and [5]


def test_cli_prints_the_overrides_counted_from_the_recipe(capsys):
    args = ["--preset", "nsys_discrete", "--steps", "[2,6]", "--ranks", "[0]"]
    assert profile_args.main([RECIPE, "--args", "actor_rollout_ref.actor.use_kl_loss=false", *args]) == 0
    line = capsys.readouterr().out.strip()
    assert shlex.split(line)[-1] == f"{CAPTURE_RANGE_END}=repeat-shutdown:4"
    assert profile_args.main(["--preset", "torch", "--steps", "[2]"]) == 2
    assert "PRESET='torch' is not a profiling preset" in capsys.readouterr().err


# ---------------------------------------------------------------- preflight


@pytest.fixture
def nsys_on_path(tmp_path, monkeypatch):
    """A fake `nsys` executable on PATH and a fake `nvtx` package on sys.path."""
    bin_dir, lib_dir = tmp_path / "bin", tmp_path / "lib"
    bin_dir.mkdir(), lib_dir.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2025.3.1'\n")
    nsys.chmod(nsys.stat().st_mode | stat.S_IXUSR)
    (lib_dir / "nvtx.py").write_text("def annotate(*a, **k):\n    return lambda f: f\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.syspath_prepend(str(lib_dir))
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))


@pytest.fixture
def small_output(monkeypatch):
    """Output estimates any test machine's disk holds, for the tests that are not about disk space."""
    for name in ("NSYS_GB_PER_RANK_STEP", "NSYS_CONTROLLER_GB", "TORCH_GB_PER_RANK_STEP", "SNAPSHOT_BYTES_PER_FRAME"):
        monkeypatch.setattr(preflight, name, 0)


def test_preflight_ignores_runs_without_a_profiler(base_cfg, tmp_path):
    assert profiling_preflight(base_cfg, tmp_path) == []


@pytest.mark.slow
def test_preflight_names_missing_nsys_and_nvtx(profiled, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder
    monkeypatch.setitem(sys.modules, "nvtx", None)  # import nvtx fails
    problems = profiling_preflight(profiled["nsys_step"], tmp_path / "run")
    assert len(problems) == 2
    assert "nsys (Nsight Systems CLI) is not on PATH" in problems[0] and "nsight-systems-cli" in problems[0]
    assert "'nvtx' is missing" in problems[1] and "pip install nvtx" in problems[1]


@pytest.mark.slow
@pytest.mark.usefixtures("nsys_on_path", "small_output")
@pytest.mark.parametrize("preset", ["nsys_step", "nsys_discrete"])
def test_preflight_passes_nsys_when_installed(profiled, preset, tmp_path):
    assert profiling_preflight(profiled[preset], tmp_path / "run") == []


@pytest.mark.slow
@pytest.mark.usefixtures("small_output")
def test_preflight_torch_needs_cuda_activity(profiled, tmp_path, monkeypatch):
    activities = torch.profiler.ProfilerActivity
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {activities.CPU})
    problems = profiling_preflight(profiled["torch_rollout"], tmp_path)
    assert len(problems) == 1 and "cannot record CUDA kernels" in problems[0] and "['CPU']" in problems[0]
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {activities.CPU, activities.CUDA})
    assert profiling_preflight(profiled["torch_rollout"], tmp_path) == []


@pytest.mark.slow
@pytest.mark.usefixtures("small_output")
def test_preflight_torch_memory_needs_a_cuda_device(profiled, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "needs a CUDA device" in profiling_preflight(profiled["torch_memory"], tmp_path)[0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert profiling_preflight(profiled["torch_memory"], tmp_path) == []


@pytest.mark.slow
@pytest.mark.usefixtures("nsys_on_path")
def test_preflight_sizes_disk_at_save_path_and_rays_folder(profiled, tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "NSYS_GB_PER_RANK_STEP", 1e6)  # more than any disk
    problems = profiling_preflight(profiled["nsys_step"], tmp_path / "run")
    # RANKS=[0,4] are on one 8-GPU node, STEPS has 2: 2 x 2 rank-steps, plus the controller's report
    assert len(problems) == 2
    assert f"global_profiler.save_path profile ({tmp_path / 'run' / 'profile'})" in problems[0]
    assert f"Ray's nsight folder ({tmp_path / 'raytmp' / 'ray'})" in problems[1]
    assert all("about 4000001.0 GB of nsys output expected" in p and "fewer STEPS/RANKS" in p for p in problems)


@pytest.mark.slow
def test_preflight_absolute_save_path_and_torch_memory_estimate(profiled, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(preflight, "SNAPSHOT_BYTES_PER_FRAME", 10**9)
    cfg = _with(profiled["torch_memory"], actor_rollout_ref__actor__profiler__save_path=str(tmp_path / "big"))
    problems = profiling_preflight(cfg, tmp_path / "run")
    # 2 ranks on the node x 2 snapshots x 100000 entries x 32 frames
    assert len(problems) == 1 and f"({tmp_path / 'big'})" in problems[0]
    assert f"about {4 * 100000 * 32 * 10**9 / preflight.GB:.1f} GB" in problems[0]


@pytest.mark.slow
@pytest.mark.parametrize("ranks, all_ranks, expected", [
    ([0], False, 1), ([0, 8], False, 1), ([0, 4], False, 2), ([], False, 1), ([3], True, 8), ([0, 1, 9], False, 2),
])
def test_profiled_ranks_per_node(profiled, ranks, all_ranks, expected):
    cfg = _with(profiled["torch_rollout"], actor_rollout_ref__actor__profiler__ranks=ranks,
                actor_rollout_ref__actor__profiler__all_ranks=all_ranks)
    assert preflight.profiled_ranks_per_node(cfg) == expected


def test_free_gb_reads_the_nearest_existing_folder(tmp_path):
    assert preflight.free_gb(tmp_path / "not" / "yet") == pytest.approx(preflight.free_gb(tmp_path), rel=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("changes, message", [
    ({"global_profiler__steps": []}, "global_profiler.steps is empty, so nothing is profiled"),
    ({"global_profiler__steps": [2, 9]}, "goes past trainer.total_training_steps=6"),
    ({"actor_rollout_ref__actor__profiler__enable": False, "actor_rollout_ref__ref__profiler__enable": False,
      "critic__profiler__enable": False}, "no role is profiled"),
    ({"global_profiler__global_tool_config__nsys__worker_nsight_options__capture-range-end": None},
     f"is None, but each profiled worker process opens 2 capture range(s) (steps [2, 6], discrete=False); "
     f"nsys writes the reports while the job runs only when the count is exact (verl issue 4920): set "
     f"{CAPTURE_RANGE_END}=repeat-shutdown:2"),
])
def test_preflight_config_problems(profiled, changes, message):
    problems = preflight.config_problems(_with(profiled["nsys_step"], **changes))
    assert len(problems) == 1 and message in problems[0]


@pytest.mark.usefixtures("nsys_on_path", "small_output")
def test_preflight_catches_steps_changed_without_profile_args(recipe, tmp_path):
    cfg = compose(recipe, ["+configs/profiling=nsys_discrete", "global_profiler.steps=[2,3,4]",
                           "trainer.total_training_steps=4"])
    assert profiling_preflight(cfg, tmp_path) == [
        f"{CAPTURE_RANGE_END} is 'repeat-shutdown:6', but each profiled worker process opens 9 capture range(s) "
        f"(steps [2, 3, 4], discrete=True); nsys writes the reports while the job runs only when the count is exact "
        f"(verl issue 4920): set {CAPTURE_RANGE_END}=repeat-shutdown:9"]
