"""Hydra overrides for a profiling run: a preset from configs/profiling/ plus the user's steps and ranks.

    python -m verl_recipes.perf.profile_args [<recipe> [--version vN] [--variant V] [--args "k=v ..."]]
                                        --preset nsys_step --steps [2,3] --ranks [0]

prints the overrides on one line, shell-quoted, for `make <recipe>-profile PRESET=... STEPS=... RANKS=...`.
With a recipe, the nsys capture ranges are counted from the recipe as composed with its ARGS.

- STEPS: the RL steps to profile, e.g. [2,3] (steps count from 1; step 1 carries start-up costs).
- RANKS: the global ranks to profile, e.g. [0,8] for one rank on each of two 8-GPU nodes, or `all`.
  The actor's rank list is the one set; the rollout inherits it in verl (rollout.yaml) and the
  reference and critic follow it in configs/profiling/common.yaml.
- The run stops after the last profiled step (trainer.total_training_steps = max(STEPS)).
- nsys: `capture-range-end=repeat-shutdown:N` where N is the number of capture ranges one worker
  process opens, so nsys finalises its reports as soon as the last one ends (verl issue 4920; verl's
  own default counts 6 per step and leaves whole-step reports unwritten until the process exits).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings

from omegaconf import DictConfig

from verl_recipes.catalog import RecipeError

CAPTURE_RANGE_END = "global_profiler.global_tool_config.nsys.worker_nsight_options.capture-range-end"
# Without a recipe to count from, a discrete nsys run is assumed to be a GRPO/PPO actor with a reference
# and no critic: three annotated stages per step (actor_compute_log_prob, ref_compute_log_prob, actor_update).
DEFAULT_DISCRETE_RANGES_PER_STEP = 3
# configs/profiling/<preset>.yaml -> (its global_profiler.tool, its nsys discrete flag); common.yaml is shared by
# all and not a preset. tests/test_profiling.py checks this table against the fragments.
PRESETS = {
    "nsys_step": ("nsys", False),
    "nsys_discrete": ("nsys", True),
    "torch_rollout": ("torch", False),
    "torch_memory": ("torch_memory", False),
}


def parse_int_list(text: str, name: str, minimum: int) -> list[int]:
    """`[2,6]`, `2,6` or `6` -> [2, 6] (sorted, no duplicates)."""
    body = str(text).strip().removeprefix("[").removesuffix("]")
    try:
        values = sorted({int(part) for part in body.split(",") if part.strip()})
    except ValueError:
        values = []
    if not values or values[0] < minimum:
        raise ValueError(f"{name}={text!r}: expected a list of integers >= {minimum}, e.g. {name}=[{minimum},{minimum + 1}]")
    return values


def hydra_list(values: list[int]) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def _ranges_in_step(cfg: DictConfig, step: int) -> int:
    """Annotated calls (DistProfiler.annotate) one hybrid worker process makes in a step of verl 0.9.1's V1
    trainer: trainer/ppo/v1/trainer_base.py _step_once, run parameter_sync_step times per step."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # verl warns that GRPO has no critic; that is the point of GRPO
        use_ref, use_critic = need_reference_policy(cfg), need_critic(cfg)
    mode = cfg.trainer.v1.trainer_mode
    sync_steps = int((cfg.trainer.v1.get(mode) or {}).get("parameter_sync_step", 1))
    bypass = bool((cfg.algorithm.get("rollout_correction") or {}).get("bypass_mode", False))
    ranges = 0 if bypass else 1  # actor_compute_log_prob (old log-probs)
    ranges += int(use_ref)  # ref_compute_log_prob
    ranges += int(cfg.trainer.critic_warmup <= step)  # actor_update
    if use_critic:  # the critic's worker shares the process (colocated pool); train_batch once per mini-batch
        samples = cfg.data.train_batch_size // sync_steps
        ranges += -(-samples // cfg.critic.ppo_mini_batch_size) * cfg.critic.ppo_epochs
    return ranges * sync_steps


def nsys_capture_ranges(cfg: DictConfig | None, steps: list[int], discrete: bool, continuous: bool = False) -> int:
    """Capture ranges (cudaProfilerStart/Stop pairs) one profiled worker process opens over the run."""
    if not discrete:  # one range per profiled step, or per run of consecutive steps when continuous
        return sum(1 for i, s in enumerate(steps) if not (continuous and i and steps[i - 1] == s - 1))
    if cfg is None:
        return DEFAULT_DISCRETE_RANGES_PER_STEP * len(steps)
    return sum(_ranges_in_step(cfg, step) for step in steps)


def profile_args(steps: str, ranks: str, preset: str, cfg: DictConfig | None = None) -> list[str]:
    """The overrides that turn a recipe into a profiling run.

    cfg: the recipe as composed with the user's ARGS (without the preset); used only to count the
    capture ranges of nsys_discrete (reference, critic, warm-up), else DEFAULT_DISCRETE_RANGES_PER_STEP.
    """
    if preset not in PRESETS:
        raise ValueError(f"PRESET={preset!r} is not a profiling preset; choose one of {', '.join(PRESETS)} "
                         f"(configs/profiling/)")
    step_list = parse_int_list(steps, "STEPS", 1)
    overrides = [f"+configs/profiling={preset}", f"global_profiler.steps={hydra_list(step_list)}",
                 f"trainer.total_training_steps={step_list[-1]}"]
    if str(ranks).strip().lower() == "all":
        overrides += ["actor_rollout_ref.actor.profiler.all_ranks=true", "actor_rollout_ref.actor.profiler.ranks=[]"]
    else:
        rank_list = parse_int_list(ranks, "RANKS", 0)
        overrides += ["actor_rollout_ref.actor.profiler.all_ranks=false",
                      f"actor_rollout_ref.actor.profiler.ranks={hydra_list(rank_list)}"]
    tool, discrete = PRESETS[preset]
    if tool == "nsys":
        overrides.append(f"{CAPTURE_RANGE_END}=repeat-shutdown:{nsys_capture_ranges(cfg, step_list, discrete)}")
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes.perf.profile_args", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", nargs="?", default="", help="recipe folder name (counts nsys ranges from it)")
    parser.add_argument("--version", default="", help="vN (default: latest)")
    parser.add_argument("--variant", default="")
    parser.add_argument("--args", default="", help="the user's Hydra overrides (ARGS), to compose the recipe with")
    parser.add_argument("--preset", required=True, help="one of configs/profiling/: " + ", ".join(PRESETS))
    parser.add_argument("--steps", default="[2,3]", help="RL steps to profile, e.g. [2,3]")
    parser.add_argument("--ranks", default="[0]", help="global ranks to profile, e.g. [0,8], or all")
    ns = parser.parse_args(argv)
    try:
        cfg = None
        if ns.recipe:
            from verl_recipes import catalog
            from verl_recipes.compose import compose

            cfg = compose(catalog.get(ns.recipe, ns.version or None, ns.variant or None), ns.args)
        print(shlex.join(profile_args(ns.steps, ns.ranks, ns.preset, cfg)))
    except (ValueError, RecipeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
