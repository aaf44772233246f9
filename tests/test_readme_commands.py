"""The READMEs, run as written: every ```bash block of the top README and of each recipe README runs verbatim in a
scratch copy of the repository, with the README's edit applied where it says `$EDITOR <file>` (the ```yaml block that
follows) and each placeholder (`<dir>`, `<N>`) filled with a dummy word. A command that needs a GPU, the network or
an install (a launch, a smoke, `pip`, `sft.sh`, ...) is replaced by a stub that says it was skipped; every other
command runs, and a failing one fails the test. The top README's copy-and-edit block ends in `make check`: that is
where every recipe, version, variant and smoke overlay is proven in `make test`, with a copy present.

Also: each recipe README's status line is its card's status."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verl_recipes import catalog
from verl_recipes.catalog import REPO

READMES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "recipes").glob("*/README.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)

# Run by make on a CPU: these targets (any recipe's -check/-show/-plan/-upstream/-publish), and a launch or smoke
# only with DRY=1. Every other target (a launch, a smoke, setup, test, bench) is skipped.
PRELUDE = r"""
skip() { echo "[readme-test] skipped (GPU, network or install): $*"; }
make() {
  local arg dry="" targets=()
  for arg in "$@"; do
    case "$arg" in DRY=1) dry=1 ;; *=*) ;; *) targets+=("$arg") ;; esac
  done
  for arg in "${targets[@]}"; do
    case "$arg" in
      check|list|diff|cp|pin|help|runs|*-check|*-show|*-plan|*-upstream|*-publish) ;;
      smoke|setup|test|test-fast|bench|*-smoke|*-profile) [[ -n $dry && $arg == smoke ]] || { skip make "$@"; return 0; } ;;
      *) [[ -n $dry ]] || { skip make "$@"; return 0; } ;;
    esac
  done
  command make "$@"
}
pip() { skip pip "$@"; }
docker() { skip docker "$@"; }
sbatch() { skip sbatch "$@"; }
python3() { if [[ "$1 $2" == "-m venv" ]]; then skip python3 "$@"; else command python3 "$@"; fi; }
# building a tiny model folder (a fine-tune on the CPU, minutes) is GPU-run preparation
python() { case "$1 $2" in "-m verl_recipes.smoke.tiny"|"-m verl_recipes.learn.build") skip python "$@" ;; *) command python "$@" ;; esac; }
bash() { case "$1" in *sft.sh) skip bash "$@" ;; *) command bash "$@" ;; esac; }
set -euo pipefail
"""


def blocks(readme: str) -> list[tuple[str, str | None]]:
    """(bash block, the yaml block right after it or None), in order."""
    found = [(m.group(1), m.group(2)) for m in FENCE.finditer((REPO / readme).read_text())]
    return [(body, found[i + 1][1] if i + 1 < len(found) and found[i + 1][0] == "yaml" else None)
            for i, (lang, body) in enumerate(found) if lang == "bash"]


def scratch_repo(tmp_path: Path) -> Path:
    """The working tree as git sees it, with a .venv whose python is this one and whose pip installs nothing."""
    repo = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for name in files:
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("python", f'exec {sys.executable} "$@"'), ("pip", 'echo "[readme-test] skipped: pip $*"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return repo


@pytest.mark.longest
@pytest.mark.slow
@pytest.mark.parametrize("readme", READMES)
def test_readme_commands_run_as_written(readme, tmp_path):
    repo = scratch_repo(tmp_path)
    env = {**{k: v for k, v in os.environ.items() if k not in ("VENV", "PY", "PYTHONPATH", "RL_RECIPE_ROOT")},
           "PATH": f"{repo / '.venv/bin'}:{os.environ['PATH']}", "RL_DATA_DIR": str(tmp_path / "data"),
           "RL_RUNS_DIR": str(tmp_path / "runs"), "HF_HUB_OFFLINE": "1"}
    for n, (body, edit) in enumerate(blocks(readme)):
        if edit is not None:  # `$EDITOR <file>` appends the README's yaml block to the file
            (tmp_path / "edit.yaml").write_text(edit)
            env["EDITOR"] = f"cat {tmp_path / 'edit.yaml'} >>"
        script = tmp_path / f"block{n}.sh"
        filled = re.sub(r"<([\w -]+)>", r"_\1_", body).replace("$EDITOR ", "eval $EDITOR ")
        script.write_text(PRELUDE + filled)
        done = subprocess.run(["bash", str(script)], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{readme} block {n + 1} failed:\n{body}\n--- output\n{done.stdout[-6000:]}\n" \
                                     f"{done.stderr[-4000:]}"


def test_the_copy_and_edit_block_runs_the_promised_commands():
    """The top README's copy-and-edit block: copy, edit, prove, diff, upstream, then the whole repository."""
    body, edit = next((b, e) for b, e in blocks("README.md") if "make cp " in b)
    commands = [line.split("#")[0].strip() for line in body.splitlines() if line.strip()]
    assert commands == ["make cp FROM=qwen25-7b-grpo TO=my-grpo", "$EDITOR recipes/my-grpo/v1/recipe.yaml",
                        "make my-grpo-check", "make diff A=qwen25-7b-grpo B=my-grpo", "make my-grpo-upstream",
                        "make check"]
    assert yaml.safe_load(edit) == {"actor_rollout_ref": {"rollout": {"n": 8}}}


@pytest.mark.parametrize("name", catalog.names())
def test_each_recipe_readme_states_its_card_status(name):
    status = catalog.load_card(name, catalog.versions(name)[-1])["status"]
    text = (REPO / "recipes" / name / "README.md").read_text()
    lines = re.findall(r"^Status: \*\*(.+?)\*\*", text, re.M)
    assert lines == [status], f"recipes/{name}/README.md: status line(s) {lines}, card says {status!r}"
    said = re.findall(r"the card says `([^`]+)`", text)
    assert all(s == status for s in said), f"recipes/{name}/README.md says the card says {said}, card: {status!r}"


def test_the_retool_readme_launch_matches_the_cold_start_card():
    """ReTool's RL starts from the card's cold start: its README says so and documents SFT_CHECKPOINT."""
    card = catalog.get("retool-qwen25-7b").card
    text = (REPO / "recipes/retool-qwen25-7b/README.md").read_text()
    assert card["cold_start"]["script"] in text and "SFT_CHECKPOINT=" in text
    assert "straight from Qwen2.5-7B-Instruct" not in text and "never looks for an SFT checkpoint" not in text
