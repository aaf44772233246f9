"""A node-run reward for random-init models: a fair coin per response, keyed by its text.

A random model scores alike on a task's reward (0 everywhere), so every GRPO advantage is 0 and DAPO's group filter
(algorithm.filter_groups, on `acc`) would evict every group and never fill a batch. A coin per response keeps the
update real and lets the filter run: a group of n samples is evicted only when all n coins agree (2^(1-n)). The
same response always gets the same coin. Never use it for training.
"""

import hashlib


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    heads = hashlib.blake2b((solution_str or "").encode(), digest_size=1).digest()[0] % 2
    return {"score": float(heads), "acc": float(heads)}
