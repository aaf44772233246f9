"""The one launcher: `python -m verl_recipes.cli <command> ...` (the Makefile calls it; see `make help`)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from verl_recipes import catalog
from verl_recipes.catalog import RecipeError


def _recipe(ns) -> catalog.Recipe:
    return catalog.get(ns.name, ns.version or None, ns.variant or None)


def cmd_list(ns) -> int:
    rows = [("recipe", "versions", "variants", "status", "workload")]
    for name in catalog.names():
        versions = catalog.versions(name)
        card = catalog.load_card(name, versions[-1])
        rows.append((name, ",".join(versions), ",".join(catalog.variants(name, versions[-1])) or "-", card["status"],
                     card.get("workload", "")))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]  # each column as wide as its longest cell
    for row in rows:
        print(" ".join(f"{cell:{width}}" for cell, width in zip(row, widths)), row[4])
    return 0


def cmd_show(ns) -> int:
    from verl_recipes.compose import compose, to_yaml

    print(to_yaml(compose(_recipe(ns), ns.args)), end="")
    return 0


def cmd_check(ns) -> int:
    import tempfile

    from verl_recipes.compose import CACHE_ENV

    with tempfile.TemporaryDirectory(prefix="verl-recipes-tiny-") as scratch:
        # `check all` composes a recipe here to list its runs, then again in a worker: they share compositions
        own = CACHE_ENV not in os.environ
        if own:
            os.environ[CACHE_ENV] = scratch
        try:
            return _check(ns, scratch)
        finally:
            if own:
                del os.environ[CACHE_ENV]


def _check(ns, scratch: str) -> int:
    from functools import cache

    from verl_recipes import parity
    from verl_recipes.check.preflight import MEGATRON, fallback_overrides
    from verl_recipes.compose import compose, split_args
    from verl_recipes.smoke.run import overlay_args, tiny_overlays

    @cache
    def tiny_model(family: str) -> str:  # built in seconds, so the planner sizes what the tiny smoke runs
        return str(tiny_model_folder(family, Path(scratch)))

    def fragments(args: list[str]) -> str:  # the label of a run: " +smoke=tiny_gpu +attention=torch_varlen"
        return "".join(f" +{arg.removeprefix('+configs/')}" for arg in args if arg.startswith("+configs/"))

    def smoke_args(recipe, tiny: bool, choice: str | None) -> list[str]:
        """A tiny smoke as the lent GPU machine launches it: its tiny model, without flash-attn or apex."""
        if not tiny:
            return overlay_args(recipe, False, recipe.card_value("smoke_model"))
        args = overlay_args(recipe, True, tiny_model(recipe.card_value("tiny_family")), choice)
        return [*args, *(o for o, _ in fallback_overrides(compose(recipe, args), lambda module: False))]

    if ns.name == "all":  # every recipe, version and variant, alone and under each smoke overlay
        runs = [(r, "", split_args(ns.args)) for r in catalog.all_recipes()]
        # the node smoke always; each tiny layout only where the card names a tiny family
        runs += [(r, fragments(args), [*args, *split_args(ns.args)])
                 for r, _, _ in list(runs) for tiny in (False, True) if not tiny or r.card_value("tiny_family")
                 for choice in (tiny_overlays(r) if tiny else [None]) for args in [smoke_args(r, tiny, choice)]]
        # every recipe can take SGLang instead of vLLM (configs/rollout/sglang)
        runs += [(r, " configs/rollout=sglang", ["configs/rollout=sglang", *split_args(ns.args)])
                 for r in catalog.all_recipes() if r.variant is None]
        # every profiling preset, on the first recipe (the presets are recipe-independent fragments)
        runs += [(runs[0][0], f" +profiling={p.stem}", [f"+configs/profiling={p.stem}", *split_args(ns.args)])
                 for p in sorted((catalog.root() / "configs/profiling").glob("*.yaml")) if p.stem != "common"]
        # every recipe as a launch on a node without flash-attn or apex composes it (the fragments the launcher adds)
        runs += [(r, fragments(overrides), [*overrides, *split_args(ns.args)])
                 for r in catalog.all_recipes() if r.variant is None or r.card_value("requirements") == MEGATRON
                 for overrides in [[o for o, _ in fallback_overrides(compose(r, split_args(ns.args)), lambda m: False)]]
                 if overrides]
        # every logger fragment (configs/logging=wandb, ...), likewise
        runs += [(runs[0][0], f" configs/logging={p.stem}", [f"configs/logging={p.stem}", *split_args(ns.args)])
                 for p in sorted((catalog.root() / "configs/logging").glob("*.yaml")) if p.stem != "console_file"]
    else:
        runs = [(_recipe(ns), "", split_args(ns.args))]
    with parity.memoized():
        return _prove(runs, ns.jobs if ns.name == "all" else 1)


def tiny_model_folder(family: str, scratch: Path) -> Path:
    """`family`'s tiny model for make check. Where the caller keeps a composition cache (the test suite), under it, in a
    folder named by the builders' sources: the model's path, and so every composition that names it, is then the same
    from run to run and is read back instead of composed (48 of make check's compositions). Else in this run's scratch.
    Built aside and renamed into place, so two checks at once never read half a model."""
    import hashlib
    import tempfile

    from verl_recipes.compose import CACHE_ENV
    from verl_recipes.smoke.tiny import MODELS

    cache = os.environ.get(CACHE_ENV)
    if not cache or Path(cache) == scratch:
        return MODELS[family](scratch / family)
    package = Path(__file__).parent
    digest = hashlib.blake2b(digest_size=8)
    for source in sorted([package / "random_models.py", *(package / "smoke").glob("*.py")]):
        digest.update(source.read_bytes())
    folder = Path(cache) / "tiny-models" / digest.hexdigest() / family
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        aside = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{family}-"))
        MODELS[family](aside)
        try:
            aside.rename(folder)
        except OSError:  # another check put it there first
            shutil.rmtree(aside, ignore_errors=True)
    return folder


def _prove(runs: list, jobs: int = 1) -> int:
    names = sorted({r.name for r, label, args in runs if not label and not args and r.published})
    # each README's generated "differs from upstream" section is current; then every run
    tasks = [("readme", name) for name in names] + [("run", run) for run in runs]
    failed = 0
    for (kind, what), errors in zip(tasks, _proofs(tasks, jobs)):
        failed += bool(errors)
        if kind == "readme":
            print(f"{'FAIL ' if errors else 'ok   '} {what} README differs-from-upstream table")
        else:
            recipe, label, args = what
            unpublished = " (unpublished copy: no pin, deviations not enforced)" if not label and not recipe.published else ""
            print(f"{'FAIL ' if errors else 'ok   '} {recipe.label}{label}{unpublished}", flush=True)
        for error in errors:
            print(f"      {error}")
    print(f"{len(tasks) - failed} proven, {failed} failed against verl {catalog_verl()}")
    return 1 if failed else 0


MAX_CHECK_JOBS = 8  # each worker imports verl and torch (about 0.6 GB); 8 share 124 proofs well enough


def check_jobs() -> int:
    """A worker per idle CPU, at least one: on a busy machine a worker more only adds its imports (check all on two
    cores, 2026-11-29: 174 CPU seconds over two workers, 154 in one process), as under make test's two workers."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # macOS has none
    return max(1, min(cpus - running_elsewhere(), MAX_CHECK_JOBS))


def running_elsewhere() -> int:
    """Processes running right now besides this one (Linux's /proc/loadavg; 0 where there is none). Not the load
    average: a minute after a test run it still counts the finished tests."""
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return 0
    return max(0, running - 1)


def _proofs(tasks: list, jobs: int):
    """Each task's errors, in order: here, or over `jobs` worker processes (each composes what it proves; a spawned
    one, as a process that has run torch may not fork safely)."""
    if jobs <= 1 or len(tasks) < 2:
        yield from map(_proof, tasks)
        return
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(min(jobs, len(tasks)), initializer=_proof_worker) as pool:
        yield from pool.imap(_proof, tasks)


def _proof_worker() -> None:
    from verl_recipes import parity

    parity.memoized().__enter__()  # a worker lives for one `make check`, as the caller's memo does


def _proof(task: tuple) -> list[str]:
    from verl_recipes import parity, pins
    from verl_recipes.check.recipe import check

    kind, what = task
    if kind == "readme":
        problem = parity.readme_problem(what)
        return [problem] if problem else []
    recipe, label, args = what
    errors = check(recipe, args)
    if not label and not args and recipe.published:  # its pin, and every deviation from upstream explained
        errors += [f"{recipe.label}: {e}" for e in pins.drift(recipe) + parity.unexplained(recipe)]
    return errors


def catalog_verl() -> str:
    from importlib.metadata import version

    return version("verl")


def cmd_plan(ns) -> int:
    from verl_recipes.check.arithmetic import arithmetic_errors
    from verl_recipes.check.memory import memory_plan
    from verl_recipes.compose import compose

    recipe = _recipe(ns)
    cfg = compose(recipe, ns.args)
    errors = arithmetic_errors(cfg)
    if errors:  # a plan of a config whose batch arithmetic fails would only mislead
        print("\n".join([*errors, f"not planned: fix the {len(errors)} error(s) above (make {recipe.name}-check)"]))
        return 1
    result = memory_plan(cfg, recipe)
    if result is None:
        raise RecipeError(f"{recipe.label}: no config.json for its model under models/; cannot plan")
    print("\n".join([*result.lines, result.verdict]))
    return 0 if result.fits and not result.errors else 1


def cmd_run(ns) -> int:
    from verl_recipes.launch import launch, launch_restarting

    if ns.restarts and ns.cluster:
        raise RecipeError(f"RESTARTS={ns.restarts} relaunches a run on this node; a cluster job is submitted once: "
                          f"leave RESTARTS unset with CLUSTER=")
    if ns.restarts and not ns.dry_run:
        return launch_restarting(_recipe(ns), ns.args, ns.restarts, mode=ns.resume)[0]
    if ns.restarts:
        print(f"[restart] a launch that fails after training a step is relaunched up to {ns.restarts} times, each "
              f"from the newest complete checkpoint", flush=True)
    return launch(_recipe(ns), ns.args, cluster=ns.cluster, mode=ns.resume, dry=ns.dry_run)[0]


def cmd_runs(ns) -> int:
    from verl_recipes import resume

    rows = resume.list_runs()
    print("\n".join(rows) if rows else f"no runs under {resume.runs_dir()}")
    return 0


def cmd_smoke(ns) -> int:
    from verl_recipes.smoke import run

    recipes = catalog.all_recipes() if ns.name == "all" else [_recipe(ns)]
    if ns.dry_run:
        return max(run.dry_run(r, ns.args) for r in recipes)
    tiny = Path(ns.tiny) if ns.tiny else None
    return max(run.run(r, ns.args, tiny, ns.overlay or None) for r in recipes)


def cmd_node(ns) -> int:
    from verl_recipes.node import run

    return (run.dry_run if ns.dry_run else run.run)(_recipe(ns), ns.gpus, ns.args)


def cmd_learn(ns) -> int:
    from verl_recipes.learn import run

    if not ns.tiny:
        raise RecipeError("learn runs on a folder from `python -m verl_recipes.learn.build`: pass --tiny (make: TINY=dir)")
    return run.run(_recipe(ns), ns.args, Path(ns.tiny), ns.seed)


def cmd_pin(ns) -> int:
    from verl_recipes import parity, pins

    if ns.name != "all":
        catalog.versions(ns.name)  # an unknown name is refused, listing the known ones
    # unpublished copies (make cp) have no pins until `make <name>-publish`
    recipes = [r for r in catalog.all_recipes() if r.published and ns.name in ("all", r.name)]
    if not recipes:
        raise RecipeError(f"recipes/{ns.name} is an unpublished copy: `make {ns.name}-publish` pins it")
    changed = pins.pin(recipes)
    for path in changed:
        print(f"pinned {path.relative_to(catalog.root())}")
    for name in sorted({r.name for r in recipes}):
        if parity.write_readme(name):
            print(f"rewrote the differs-from-upstream table of recipes/{name}/README.md")
    print(f"{len(changed)} of {len(recipes)} pin(s) rewritten; commit them with the change that moved them")
    return 0


def cmd_upstream(ns) -> int:
    from verl_recipes import parity

    recipe = _recipe(ns)
    print(f"{recipe.label} against {parity.source_line(recipe)}")
    found = parity.deviations(recipe, ns.args)
    for d in found:
        print(f"  {d.key}: ours {d.ours!r}, upstream {d.upstream!r}: "
              + (f"{d.reason} [{d.where}]" if d.reason else f"UNEXPLAINED: add `# deviation: <why>` beside it [{d.where}]"))
    for key, new in parity.reference(recipe).get("translated", {}).items():
        print(f"  {key}: {'no 0.9.1 equivalent: ' + new[6:] if new.startswith('none: ') else 'is ' + new + ' in 0.9.1'}")
    unexplained = sum(d.reason is None for d in found)
    print(f"{len(found)} deviation(s), {unexplained} unexplained")
    source = recipe.card.get("derived_from")
    if recipe.published or not source:
        return 1 if unexplained else 0
    from verl_recipes.recipe_diff import changes, report

    print(f"edits of this copy against {source}, for information (unpublished: `make {recipe.name}-publish` makes an "
          f"unexplained deviation an error):")
    print("\n".join(f"  {line}" for line in report(changes(catalog.parse(source), recipe))))
    return 0


def cmd_extract(ns) -> int:
    from verl_recipes.extract import extract

    git_dirs = {}
    for pair in ns.git_dir:
        repo, sep, folder = pair.partition("=")
        if not sep:
            raise RecipeError(f"--git-dir '{pair}': write owner/name=<path of a clone or mirror>")
        git_dirs[repo] = Path(folder)
    recipes = [r for r in catalog.all_recipes() if r.name == ns.name and r.variant is None]
    if not recipes:
        raise RecipeError(f"no recipe '{ns.name}' under recipes/ (known: {', '.join(catalog.names())})")
    for recipe in recipes:
        changed = extract(recipe, git_dirs)
        print(f"{'rewrote' if changed else 'unchanged'} {(recipe.folder / 'upstream.yaml').relative_to(catalog.root())}")
    return 0


def cmd_cp(ns) -> int:
    from verl_recipes.copy_recipe import copy_recipe

    for path in copy_recipe(catalog.parse(ns.source), ns.new_name):
        print(f"created {path}")
    print(f"next: edit recipes/{ns.new_name}/v1/recipe.yaml, then `make {ns.new_name}-check`")
    return 0


def cmd_publish(ns) -> int:
    from verl_recipes.copy_recipe import publish

    for path in publish(ns.name):
        print(f"wrote {path.relative_to(catalog.root())}")
    print(f"{ns.name} is published: `make check` now holds it to its pins and fails an unexplained deviation from "
          f"the published run (make {ns.name}-upstream lists them; add `# deviation: <why>` beside each key)")
    return 0


def cmd_diff(ns) -> int:
    from verl_recipes.recipe_diff import changes, report

    print("\n".join(report(changes(catalog.parse(ns.a), catalog.parse(ns.b)))))
    return 0


def cmd_target(ns) -> int:
    """A make target the Makefile does not have: the recipe it names (less a per-recipe suffix) is unknown."""
    from verl_recipes.copy_recipe import make_targets

    suffix = next((s for s in sorted(make_targets()[1], key=len, reverse=True) if ns.target.endswith(s)), "")
    catalog.versions(ns.target.removesuffix(suffix) if suffix else ns.target)  # raises, naming the known recipes
    raise RecipeError(f"`make {ns.target}`: no such target; `make help` lists them")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="recipes, versions, variants, status").set_defaults(fn=cmd_list)
    sub.add_parser("runs", help="run folders: recipe, last step, status, folder").set_defaults(fn=cmd_runs)
    for command, fn, text in (("show", cmd_show, "print the composed config"),
                              ("upstream", cmd_upstream, "keys that differ from the published run, with reasons"),
                              ("check", cmd_check, "prove a recipe (or 'all') against the installed verl"),
                              ("plan", cmd_plan, "memory and layout plan for the declared topology"),
                              ("run", cmd_run, "launch on this GPU node"),
                              ("smoke", cmd_smoke, "smoke-run a recipe (or 'all') and check its metric gates"),
                              ("node", cmd_node, "the recipe at its real shape (random init), 3 steps on this node"),
                              ("learn", cmd_learn, "train a warmed-up tiny model on its task; gates prove it learns")):
        p = sub.add_parser(command, help=text)
        p.add_argument("name", help="recipe folder name" + (", or 'all'" if command in ("check", "smoke") else ""))
        if command == "check":
            p.add_argument("--jobs", type=int, default=check_jobs(),
                           help=f"with 'all': worker processes (default: this machine's idle CPUs, at most {MAX_CHECK_JOBS})")
        if command == "run":
            p.add_argument("--cluster", default="", help="Ray dashboard http://<head>:8265: submit the run there")
            p.add_argument("--resume", default="auto", choices=["auto", "never", "force"],
                           help="auto: resume only an identical config; never: a fresh run folder; force: resume anyway")
            p.add_argument("--dry-run", action="store_true",
                           help="print config path, data to prepare, command and resumption decision; start nothing")
            p.add_argument("--restarts", type=int, default=0,
                           help="relaunch a failed run that trained a step up to this many times, each resuming its "
                                "newest complete checkpoint")
        if command == "smoke":
            p.add_argument("--tiny", default="", help="folder from `python -m verl_recipes.smoke.tiny` (one-GPU path)")
            p.add_argument("--overlay", default="", help="with --tiny: another tiny layout of the card's tiny_overlay list")
            p.add_argument("--dry-run", action="store_true", help="print and prove the smoke config; launch nothing")
        if command == "node":
            p.add_argument("--gpus", type=int, default=4, help="G, the node's GPUs (the recipe's batch scales by G/8)")
            p.add_argument("--dry-run", action="store_true", help="print and prove the node config; build nothing")
        if command == "learn":
            p.add_argument("--tiny", default="", help="folder from `python -m verl_recipes.learn.build`")
            p.add_argument("--seed", type=int, default=0, help="the RL phase's seed: prompt order and vLLM sampling")
        p.add_argument("--version", default="", help="vN (default: latest)")
        p.add_argument("--variant", default="", help="a variant file of the version, e.g. megatron")
        p.add_argument("--args", default="", help="Hydra overrides, e.g. \"trainer.total_epochs=1\"")
        p.set_defaults(fn=fn)
    p = sub.add_parser("pin", help="rewrite the pinned resolved configs (recipes/<name>/<version>/resolved/)")
    p.add_argument("name", nargs="?", default="all", help="a recipe folder name, or 'all' (default)")
    p.set_defaults(fn=cmd_pin)
    p = sub.add_parser("extract", help="rewrite upstream.yaml's settings from the overrides its cited scripts pass")
    p.add_argument("name", help="recipe folder name")
    p.add_argument("--git-dir", action="append", default=[], metavar="OWNER/NAME=PATH",
                   help="read that repository's scripts from a local clone or mirror instead of GitHub")
    p.set_defaults(fn=cmd_extract)
    p = sub.add_parser("cp", help="copy a recipe into a new one that inherits it")
    p.add_argument("source", help="name[/vN][:variant]")
    p.add_argument("new_name")
    p.set_defaults(fn=cmd_cp)
    p = sub.add_parser("publish", help="hold a `make cp` copy to the rules of a published recipe: pins, deviations")
    p.add_argument("name", help="recipe folder name")
    p.set_defaults(fn=cmd_publish)
    p = sub.add_parser("target", help="explain a make target the Makefile does not have (make's .DEFAULT)")
    p.add_argument("target")
    p.set_defaults(fn=cmd_target)
    p = sub.add_parser("diff", help="keys that differ between two composed recipes")
    p.add_argument("a", help="name[/vN][:variant]")
    p.add_argument("b", help="name[/vN][:variant]")
    p.set_defaults(fn=cmd_diff)
    ns = parser.parse_args(argv)
    try:
        return ns.fn(ns)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
