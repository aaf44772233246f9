"""The package cannot be shadowed: verl 0.9.1's wheel installs top-level `scripts` and `tests` packages, so our code
lives in `verl_recipes`, installed editable by `make setup`, with the top-level rewards/ and agents/ folders mapped to
`verl_recipes.rewards` and `verl_recipes.agents` (pyproject.toml). From any directory, with PYTHONPATH unset, every module
that a composed recipe names (reward functions, tool classes, hooks, reward managers, dataset classes) must import
from this repository's files, as verl's Ray workers import them."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from verl_recipes import catalog, pins
from verl_recipes.catalog import REPO
from verl_recipes.check.preflight import required_objects
from verl_recipes.compose import compose
from verl_recipes.smoke.run import overlay_args


def named_modules(cfg) -> set[str]:
    """Modules a resolved config names by Python path."""
    modules = {obj.partition(":")[0] for obj in required_objects(cfg)}
    manager = cfg.reward.reward_manager
    if manager.get("source") == "importlib" and manager.module.path and str(manager.module.path).startswith("pkg://"):
        modules.add(str(manager.module.path).removeprefix("pkg://"))
    custom = cfg.data.custom_cls.path
    if custom and str(custom).startswith("pkg://"):
        modules.add(str(custom).removeprefix("pkg://"))
    return modules


@pytest.fixture(scope="module")
def modules() -> set[str]:
    found = set()
    for recipe in catalog.all_recipes():
        # the pinned resolved config is the composed one (tests/test_pins.py); reading it saves a compose (an
        # unpublished copy has no pin)
        if recipe.published:
            pinned = pins.pin_file(recipe).read_text().replace("<repo>", str(REPO))
            found |= named_modules(OmegaConf.create(yaml.safe_load(pinned)))
        else:
            found |= named_modules(compose(recipe))
        if recipe.card_value("tiny_family"):
            found |= named_modules(compose(recipe, overlay_args(recipe, True, "Qwen/Qwen2.5-0.5B-Instruct")))
    return found


@pytest.mark.slow
def test_every_named_module_imports_from_this_repository_anywhere(modules, tmp_path):
    assert {"verl_recipes.rewards.math", "verl_recipes.agents.code_interpreter",
            "verl_recipes.runtime.freeze_vision", "verl_recipes.rewards.smoke"} <= modules, modules
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    program = ("import importlib, json, sys; "
               "print(json.dumps({m: importlib.import_module(m).__file__ for m in sys.argv[1:]}))")
    done = subprocess.run([sys.executable, "-c", program, *sorted(modules)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    files = json.loads(done.stdout.splitlines()[-1])
    homes = tuple(str(REPO / folder) + os.sep for folder in ("verl_recipes", "rewards", "agents"))
    outside = {m: f for m, f in files.items() if not os.path.realpath(f).startswith(homes)}
    assert not outside, f"imported from outside {REPO}: {outside}"
    assert files["verl_recipes.rewards.math"] == str(REPO / "rewards/math.py")
    assert files["verl_recipes.agents.code_interpreter"] == str(REPO / "agents/code_interpreter.py")


def test_verl_installs_the_names_we_left():
    """Why the package has its own name: verl's wheel owns top-level `scripts` and `tests`."""
    from importlib.util import find_spec

    for name in ("scripts", "tests"):
        spec = find_spec(name)
        assert spec is None or "site-packages" in (spec.origin or str(spec.submodule_search_locations)), name
    assert not (REPO / "scripts" / "__init__.py").exists() and not (REPO / "tests" / "__init__.py").exists()


@pytest.mark.slow
def test_the_runtime_part_imports_nothing_else_of_the_package(tmp_path):
    """A cluster job ships verl_recipes/runtime, rewards/ and agents/ alone: importing every module of them must not
    pull the rest of the package in."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shipped = {"verl_recipes/runtime": "verl_recipes.runtime", "rewards": "verl_recipes.rewards",
               "agents": "verl_recipes.agents"}
    runtime = sorted(f"{package}.{p.stem}" for folder, package in shipped.items()
                     for p in (REPO / folder).glob("*.py") if p.name not in ("__init__.py", "sandbox_child.py"))
    program = ("import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
               "print(sorted(m for m in sys.modules if m.startswith('verl_recipes') and m != 'verl_recipes' "
               f"and not m.startswith({tuple(shipped.values())!r})))")
    done = subprocess.run([sys.executable, "-c", program, *runtime], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


def test_the_runtime_part_names_nothing_else_of_the_package_even_inside_functions():
    """An import inside a function runs only when the function does (in a cluster job's worker, mid-run), so the test
    above, which imports each module, cannot see it: every import statement of the shipped modules, at any depth,
    names a shipped package or none of ours (2026-11-29: the forced-lengths plugin imported verl_recipes.bench inside
    its wrapper)."""
    import ast

    shipped = ("verl_recipes.runtime", "verl_recipes.rewards", "verl_recipes.agents")
    outside = []
    for folder in ("verl_recipes/runtime", "rewards", "agents"):
        for path in sorted((REPO / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                outside += [f"{path.relative_to(REPO)}:{node.lineno} {name}" for name in names
                            if name.startswith("verl_recipes") and name != "verl_recipes"
                            and not name.startswith(shipped)]
    assert not outside, outside


def test_the_readme_layout_table_matches_the_tree():
    """Every path the README's layout table names exists, and every top-level folder and subpackage is named."""
    import re

    text = (REPO / "README.md").read_text()
    table = text[text.index("## Layout\n"):text.index("\n## ", text.index("## Layout\n") + 1)]
    cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    named = set()
    for cell in cells:
        for path in re.findall(r"`([^`]+)`", cell):
            named.add(path.split("<")[0].rstrip("/"))
    for path in named:
        assert (REPO / path).exists(), f"README layout names {path}, which does not exist"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    top = {p.split("/")[0] for p in tracked if "/" in p and not p.startswith(".")}
    packages = {str(p.parent.relative_to(REPO)) for p in (REPO / "verl_recipes").glob("*/__init__.py")}
    missing = {d for d in top | packages if not any(n == d or n.startswith(d + "/") for n in named)}
    assert not missing, f"README layout table does not name {sorted(missing)}"


def test_pyproject_installs_every_package_of_the_tree():
    """pyproject lists the packages by hand (package-dir cannot be combined with find): a new subpackage of
    verl_recipes/ missing from the list would be left out of a non-editable install."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    tree = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "verl_recipes").rglob("__init__.py")}
    mapped = setuptools["package-dir"]
    assert mapped == {"verl_recipes.rewards": "rewards", "verl_recipes.agents": "agents"}
    assert all((REPO / folder / "__init__.py").is_file() for folder in mapped.values())
    assert set(setuptools["packages"]) == tree | set(mapped)
