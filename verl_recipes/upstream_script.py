"""The Hydra overrides an upstream launch script passes, read from the script at its cited commit.

The shell is resolved by bash itself, not by a parser of ours: variables, `${VAR:-x}` defaults, `$((...))`,
line continuations, arrays, `case` and `if` branches all mean what they mean when a user runs the script. No
program runs: PATH is an empty folder, so every command (python3, uv, date, nvidia-smi, tee) reaches bash's
`command_not_found_handle`, which prints the words of a call that runs a Python module (`... -m <module> ...`)
and fails like a missing program (so `python3 -c 'import torch_npu' && echo npu || echo gpu` takes the GPU
branch). The environment is empty, so every `${VAR:-default}` takes the script's default; `$HOME` stays the
literal `$HOME` and the working folder reads as `$PWD`, so the result is the same on every machine.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from verl_recipes.catalog import RecipeError

# `set -e` and `set -x` are switched back off after the script sets them: a missing program is not an error here
_HARNESS = r"""
command_not_found_handle() {
  local word
  for word in "$@"; do
    if [ "$word" = -m ]; then
      { printf '\0CALL'; printf '\0%s' "$@"; printf '\0END'; } >> "$__RECIPES_CALLS"; break
    fi
  done
  return 127
}
set() { builtin set "$@"; builtin set +ex; }
script=$1; shift
source "$script"
"""


def script_text(source: dict, git_dirs: dict[str, Path] | None = None) -> str:
    """The file at its commit: from a local clone or mirror of the repository ({owner/name: git dir}), else GitHub."""
    repo, path, commit = source["repo"], source["path"], source["commit"]
    git_dir = (git_dirs or {}).get(repo)
    if git_dir is not None:
        done = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                              capture_output=True, text=True)
        if done.returncode:
            raise RecipeError(f"{git_dir} has no {path} at {commit}: {done.stderr.strip()}")
        return done.stdout
    url = f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.read().decode()
    except OSError as err:
        raise RecipeError(f"cannot read {url} ({err}); pass --git-dir {repo}=<a clone of it>") from None


def module_calls(text: str) -> list[list[str]]:
    """The words of every `... -m <module> ...` call the script makes, shell resolved, in order."""
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        (folder / "bin").mkdir()
        (folder / "launch.sh").write_text(text)
        (folder / "harness.sh").write_text(_HARNESS)
        env = {"PATH": str(folder / "bin"), "HOME": "$HOME", "__RECIPES_CALLS": str(folder / "calls")}
        (folder / "calls").touch()
        bash = shutil.which("bash") or "/bin/bash"  # found before PATH is emptied
        subprocess.run([bash, "--noprofile", "--norc", "harness.sh", "launch.sh"], cwd=folder, env=env,
                       capture_output=True, timeout=60)
        out = (folder / "calls").read_text().replace(str(folder.resolve()), "$PWD").replace(work, "$PWD")
    calls = []
    for chunk in out.split("\0CALL")[1:]:
        words, _, _ = chunk.partition("\0END")
        calls.append(words.split("\0")[1:])
    return calls


def launch(text: str, where: str) -> tuple[str, list[str]]:
    """(module, arguments) of the script's one trainer launch: the call of a module whose name has `main`."""
    calls = [c for c in module_calls(text) if "main" in c[c.index("-m") + 1]]
    if len(calls) != 1:
        found = ", ".join(c[c.index("-m") + 1] for c in calls) or "none"
        raise RecipeError(f"{where}: expected one trainer launch (`-m <...main...>`), found {found}")
    words = calls[0]
    at = words.index("-m")
    return words[at + 1], words[at + 2:]


def overrides(arguments: list[str]) -> list[str]:
    """The Hydra overrides among a launch's arguments (`key=value`, `+key=value`, `~key`): not `--config-name`."""
    return [a for a in arguments if not a.startswith("-") and ("=" in a or a.startswith("~"))]
