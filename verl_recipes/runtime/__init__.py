"""What verl's Ray workers import by name from a recipe's config: rule-based rewards (`pkg://` reward paths),
agent tools and their sandbox (tool `class_name`s and the tool configs beside them) and the vision-freeze hook
(`actor_rollout_ref.model.external_lib`). A cluster job ships this folder and nothing else of the repository,
so nothing here may import the rest of `verl_recipes`.
"""
