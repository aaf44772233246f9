"""CLI: python -m verl_recipes.planner <resolved-config.yaml> <hf config.json or model dir> [--gpu-mem GiB].

Exit status 0 when the plan fits, 1 when it does not.
"""

import argparse
import sys

from omegaconf import OmegaConf

from verl_recipes.planner.plan import plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes.planner", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="composed, resolved verl 0.9.1 config (yaml)")
    parser.add_argument("hf_config", help="the model's config.json, or the directory holding it")
    parser.add_argument("--gpu-mem", type=float, default=80.0, help="GiB of memory per GPU (default 80)")
    args = parser.parse_args(argv)
    result = plan(OmegaConf.load(args.config), args.hf_config, gpu_memory_gib=args.gpu_mem)
    print("\n".join(result.lines))
    print(result.verdict)
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
