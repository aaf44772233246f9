"""A smoke-test reward for random-init models: its score varies from sample to sample.

A random model never answers correctly, so a real reward is 0 everywhere, GRPO advantages are 0 and the
update is a no-op. This score (the share of digits in the response) varies, so gradients are real.
Never use it for training.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = (solution_str or "")[-4096:]
    digits = sum(ch.isdigit() for ch in text) / max(1, len(text))
    return {"score": digits, "acc": float(digits > 0.1)}
