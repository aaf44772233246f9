"""Rule-based reward functions, imported by verl's workers as `verl_recipes.rewards.<module>` (pyproject.toml maps this
folder). verl calls `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`. Shipped alone
to a cluster job: import nothing of verl_recipes but `verl_recipes.rewards`.
"""
