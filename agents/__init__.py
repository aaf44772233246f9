"""Agent-loop tools (verl BaseTool classes, their tool configs beside them) and the local code sandbox, imported by
verl's workers as `verl_recipes.agents.<module>` (pyproject.toml maps this folder). Shipped alone to a cluster job:
import nothing of verl_recipes but `verl_recipes.agents`.
"""
