"""End to end: whole GRPO steps of a recipe through verl's trainer, against verl's example settings, the async variants
and the recipe with one lever more (issue 43; e2e_levers.py runs those beside it).

One arm per call (verl_recipes/bench/e2e_arms.py): a random-init model of a real shape (Qwen2.5-1.5B, or 7B with
--shape; model_shape.py) and long-tail prompts (e2e_inputs.py) are written first, response lengths follow lengths.py
through forced lengths at verl's rollout server (forced_lengths.py), the arm runs --steps steps, and verl's own
metrics.jsonl is reduced to $OUT/e2e.<arm>.json (e2e_report.py) with the conditions; metrics and config are copied
beside it.

    python -m verl_recipes.bench.e2e --arm ours                 # GPU node, one arm, ~6-9 min (lent machine:
                                                                # bash tests/gpu/bench_e2e.sh --arm ours)
    python -m verl_recipes.bench.e2e --compare A.json B.json    # ratios A / B, each naming its factors
    python -m verl_recipes.bench.e2e --cpu-dry-run              # every arm composed and proven on the tiny model
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verl_recipes.bench import e2e_arms, e2e_inputs, e2e_report, model_shape, report
from verl_recipes.catalog import RecipeError


def prepare(work: Path, shape: str, weights: bool, num_prompts: int) -> tuple[Path, list[Path]]:
    """The model and data every arm reads; RL_DATA_DIR points the recipes' data fragment at the data."""
    model = work / f"model-{shape}"
    model_shape.write(shape, model, weights)
    files = e2e_inputs.write_data(work / "data", num_prompts)
    os.environ["RL_DATA_DIR"] = str(work / "data")
    return model, files


def arm_args(arm: str, ns, model: Path, files: list[Path]) -> list[str]:
    return e2e_arms.bench_args(arm, model, files, ns.steps, ns.batch, ns.mini_batch) + ns.args.split()


def dry_run(ns) -> int:
    """Compose and prove every arm on the tiny model and print the exact command; nothing starts."""
    from verl_recipes.check.recipe import check
    from verl_recipes.launch import plan_launch, verl_command

    work = Path(tempfile.mkdtemp(prefix="e2e-dry-"))
    os.environ["RL_RUNS_DIR"] = str(work / "runs")
    model, files = prepare(work, model_shape.TINY, weights=False, num_prompts=ns.batch)
    failed = 0
    for arm in ns.arms.split(","):
        settings = e2e_arms.ARMS[arm]
        config, args = e2e_arms.config_of(arm, ns.recipe), arm_args(arm, ns, model, files)
        lever = "".join(f" {override}" for override in settings.overrides)
        math = " (changes the math: opt-in)" if settings.changes_math else ""
        print(f"# ---- {arm}: {config.label}{lever}{math} ----")
        try:
            if settings.verl_example:
                errors, command = check(config, args), verl_command(config, work / "runs" / arm)
            else:
                errors, command = [], plan_launch(config, args, tag="-bench", mode="never", dry=True).command
        except RecipeError as err:
            errors, command = [str(err)], []
        print(f"# GPU: python -m verl_recipes.bench.e2e --arm {arm}\n# overrides: {' '.join(args)}")
        print(" ".join(command))
        print(f"# {'FAIL' if errors else 'ok'}: {arm}" + "".join(f"\n#   {e}" for e in errors))
        failed += bool(errors)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def run_example(config, args: list[str], runs: Path) -> tuple[int, Path, object]:
    """verl's example as its script runs it: verl's entry point on the composed config, no launcher of ours."""
    from verl_recipes.check.recipe import check
    from verl_recipes.compose import compose, to_yaml
    from verl_recipes.launch import run_env, verl_command

    errors = check(config, args)
    if errors:
        raise RecipeError("not launched:\n  " + "\n  ".join(errors))
    cfg = compose(config, args)
    launch_dir = runs / "verl_example" / time.strftime("%Y%m%d-%H%M%S")
    launch_dir.mkdir(parents=True)
    (launch_dir / "config.yaml").write_text(to_yaml(cfg))
    command = verl_command(config, launch_dir)
    print(f"[e2e] {' '.join(command)}", flush=True)
    return subprocess.call(command, cwd=launch_dir, env=run_env(launch_dir)), launch_dir, cfg


def run(ns) -> int:
    from verl_recipes.check import gates
    from verl_recipes.launch import launch

    work = Path(ns.work)
    os.environ.setdefault("RL_RUNS_DIR", str(work / "runs"))
    # Ray workers and the vLLM engine import verl_recipes (rewards, attention, forced lengths) as this process does:
    # installed, or laid out as installed by tests/gpu/bench_e2e.sh. The checkout itself must not go first on their
    # PYTHONPATH: its verl_recipes/ has no rewards/ (pyproject package-dir maps it), so the reward workers would fail.
    started = time.time()
    model, files = prepare(work, ns.shape, weights=True, num_prompts=ns.steps * ns.batch)
    config, args = e2e_arms.config_of(ns.arm, ns.recipe), arm_args(ns.arm, ns, model, files)
    if e2e_arms.ARMS[ns.arm].verl_example:
        rc, run_dir, cfg = run_example(config, args, Path(os.environ["RL_RUNS_DIR"]))
    else:
        rc, run_dir, cfg = launch(config, args, tag="-bench", mode="never")
    metrics = run_dir / "metrics.jsonl"
    steps = gates.read_metrics(metrics) if metrics.is_file() else {}
    samples = ns.steps * ns.batch * int(cfg.actor_rollout_ref.rollout.n)  # what every arm trains on
    payload = {
        **report.environment(cpu_dry_run=False),
        "arm": ns.arm, "config": config.label, "args": args, "rc": rc, "wall_s": round(time.time() - started, 1),
        "conditions": {"shape": ns.shape, "weights": "random init (seed 0)", "steps": ns.steps, "batch": ns.batch,
                       "mini_batch": ns.mini_batch, "samples": samples, "gpus": e2e_arms.ARMS[ns.arm].gpus,
                       "attention": "torch_varlen + chunked log-probs in every arm (no flash-attn)",
                       "lengths": "forced per request from verl_recipes/bench/lengths.py: max_tokens + ignore_eos "
                                  "at verl's rollout server (runtime/forced_lengths.py)"},
        "report": e2e_report.reduce(steps, samples) if steps else None,
    }
    out = os.environ.get("OUT")
    if out:
        for name in ("metrics.jsonl", "config.yaml"):
            if (run_dir / name).is_file():
                shutil.copy(run_dir / name, Path(out) / f"e2e.{ns.arm}.{name}")
    print(json.dumps(payload["report"], indent=1))
    print(f"[e2e] {ns.arm}: rc={rc}, {len(steps)} steps logged -> {report.write_json(f'e2e.{ns.arm}', payload)}")
    return 1 if rc or not steps else 0


def compare(paths: list[str]) -> int:
    ours, base = (json.loads(Path(path).read_text()) for path in paths)
    found = e2e_report.ratios(ours["report"], base["report"], ours["arm"], base["arm"])
    rows = [{"quantity": name, **value} for name, value in found.items()]
    print(report.table(rows, [("quantity", "quantity"), ("speedup", f"{ours['arm']} / {base['arm']}"),
                              ("factors", "factors")]))
    # where and when each arm ran, and its every step: a ratio of two medians hides how alike the steps were
    arms = {arm["arm"]: {"file": Path(path).name, "hardware": arm.get("host", arm.get("hardware")),
                         "date": arm.get("date"), "steps_s": arm["report"].get("steps_s")}
            for arm, path in zip((ours, base), paths)}
    report.write_json(f"e2e.{ours['arm']}-vs-{base['arm']}", {"arms": arms, "ratios": found})
    return 0


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", choices=list(e2e_arms.ARMS), help="the arm this call runs (GPU)")
    parser.add_argument("--arms", default=",".join(e2e_arms.ARMS), help="arms of --cpu-dry-run")
    parser.add_argument("--cpu-dry-run", action="store_true", help="compose and prove every arm, print the commands")
    parser.add_argument("--compare", nargs=2, metavar=("OURS_JSON", "BASE_JSON"), help="ratios between two arms")
    parser.add_argument("--recipe", default="qwen25-7b-grpo", help="name[/vN]; the async arms take its variants")
    parser.add_argument("--shape", choices=list(model_shape.HUB_IDS), default="qwen2.5-1.5b")
    parser.add_argument("--steps", type=int, default=3, help="training steps (the first is left out as warm-up)")
    parser.add_argument("--batch", type=int, default=64, help="prompts per step (x rollout.n samples)")
    parser.add_argument("--mini-batch", type=int, default=16, help="prompts per update (the recipe's 1024/256 ratio)")
    parser.add_argument("--work", default="/tmp/e2e", help="model, data and run folders (GPU)")
    parser.add_argument("--args", default="", help="extra overrides for the arm, as ARGS")
    ns = parser.parse_args(argv)
    if not (ns.cpu_dry_run or ns.compare or ns.arm):
        parser.error("give --arm, --compare or --cpu-dry-run")
    return ns


def main(argv=None) -> int:
    ns = parse_args(argv)
    if ns.compare:
        return compare(ns.compare)
    return dry_run(ns) if ns.cpu_dry_run else run(ns)


if __name__ == "__main__":
    sys.exit(main())
