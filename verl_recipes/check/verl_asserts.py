"""The inventory of verl's configuration-dependent asserts, and what covers each (verl_asserts.yaml beside this file).

`extract()` walks the verl source a recipe reaches before and during its first step (PATHS) and lists every
`assert` and every `raise` (with the `if` that guards it) whose condition reads configuration. Each inventory entry
names the rule of this package that checks it before start-up, or says why it cannot be checked statically.

After a verl bump, re-walk it: `python -m verl_recipes.check.verl_asserts` prints the entries that moved, appeared
or vanished against the installed verl; tests/test_verl_asserts.py fails until the YAML matches again.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from verl_recipes import yaml_parser

INVENTORY = Path(__file__).with_name("verl_asserts.yaml")
# verl modules (relative to the verl package) on the start-up and first-step paths of our entry points
PATHS = (
    "trainer/main_ppo.py",
    "trainer/ppo/ray_trainer.py",
    "trainer/ppo/utils.py",
    "trainer/ppo/v1/*.py",
    "experimental/fully_async_policy/*.py",
    "experimental/agent_loop/*.py",
    "experimental/reward_loop/*.py",
    "workers/engine_workers.py",
    "workers/engine/fsdp/transformer_impl.py",
    "workers/engine/megatron/transformer_impl.py",
    "workers/config/*.py",
    "workers/rollout/replica.py",
    "workers/rollout/vllm_rollout/vllm_async_server.py",
    "workers/rollout/vllm_rollout/vllm_rollout.py",
    "workers/rollout/sglang_rollout/async_sglang_server.py",
    "workers/rollout/sglang_rollout/sglang_rollout.py",
    "utils/dataset/rl_dataset.py",
    "utils/seqlen_balancing.py",
    "utils/checkpoint/fsdp_checkpoint_manager.py",
    "utils/checkpoint/megatron_checkpoint_manager.py",
    "utils/checkpoint/checkpoint_manager.py",
    "utils/config.py",
)
# a condition reads configuration when it names a config object or a value verl copies out of one
CONFIG_WORDS = re.compile(
    r"config|cfg\b|_size\b|_size_per|n_gpus|nnodes|world_size|micro_batch|mini_batch|strategy|\bmode\b|_mode\b|"
    r"use_dynamic_bsz|max_token_len|ppo_epochs|rollout_n|\bn\b|engine_name|backend|tensor_parallel|pipeline|"
    r"expert_parallel|context_parallel|offload|hybrid_engine|trainer_mode|staleness|sync_step|total_training_steps"
)


@dataclass(frozen=True)
class Site:
    where: str  # "path/in/verl.py:line"
    kind: str  # "assert" or "raise"
    condition: str  # the assert's test, or the test of the `if` that guards the raise (one line)
    test_line: int = 0  # where that test is evaluated (the assert's line, or the guarding `if`'s)

    @property
    def key(self) -> str:
        return f"{self.where} {self.kind} {self.condition}"


def verl_root() -> Path:
    import verl

    return Path(verl.__file__).parent


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _sites(path: Path, rel: str) -> list[Site]:
    source = path.read_text()
    tree = ast.parse(source)
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            condition = ast.get_source_segment(source, node.test) or ""
            found.append(Site(f"{rel}:{node.lineno}", "assert", _one_line(condition), node.lineno))
        elif isinstance(node, ast.Raise) and node.exc is not None:
            guard = parents.get(node)
            while guard is not None and not isinstance(guard, (ast.If, ast.FunctionDef, ast.AsyncFunctionDef)):
                guard = parents.get(guard)
            if isinstance(guard, ast.If):
                condition = ast.get_source_segment(source, guard.test) or ""
                found.append(Site(f"{rel}:{node.lineno}", "raise", _one_line(condition), guard.lineno))
    return [s for s in found if CONFIG_WORDS.search(s.condition)]


def extract(root: Path | None = None) -> list[Site]:
    """Every configuration-dependent assert/raise on PATHS in the installed (or given) verl, in file order."""
    root = root or verl_root()
    sites = []
    for pattern in PATHS:
        for path in sorted(root.glob(pattern)):
            if path.name != "__init__.py":
                sites += _sites(path, str(path.relative_to(root)))
    return sorted(sites, key=lambda s: (s.where.split(":")[0], int(s.where.split(":")[1])))


def load() -> list[dict]:
    return yaml_parser.safe_load(INVENTORY.read_text())["asserts"]


def counts(entries: list[dict] | None = None) -> dict[str, int]:
    entries = load() if entries is None else entries
    checked = sum(1 for e in entries if e.get("rule"))
    return {"total": len(entries), "checked": checked, "not_checkable": len(entries) - checked}


def differences(entries: list[dict], sites: list[Site]) -> list[str]:
    """What the inventory and the installed verl disagree on, one line each."""
    listed = {f"{e['where']} {e['kind']} {e['condition']}" for e in entries}
    found = {s.key for s in sites}
    return [f"in verl, not in the inventory: {k}" for k in sorted(found - listed)] + \
           [f"in the inventory, not in verl: {k}" for k in sorted(listed - found)]


def main() -> int:
    problems = differences(load(), extract())
    print("\n".join(problems) if problems else f"inventory matches the installed verl: {counts()}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
