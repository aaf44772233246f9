"""tests/gpu/calibrate_log_prob.py --cpu-dry-run: verl's actor runs the old-log-prob pass as the trainer asks for it
(entropy on, no loss) on packed micro-batches of exactly the requested tokens, with the entropy chunked and not."""


import pytest
from conftest import run_dry


@pytest.mark.slow
def test_dry_run_measures_every_budget_in_both_entropy_modes(tmp_path):
    _, result = run_dry(["tests/gpu/calibrate_log_prob.py", "--cpu-dry-run"], tmp_path, "calibrate_log_prob.json")
    assert [(row["chunking"], row["tokens"]) for row in result["rows"]] == [
        (False, 64), (False, 128), (True, 64), (True, 128)]
    for row in result["rows"]:
        assert row["entropy_shape"] == [row["tokens"]]  # one entropy per packed token: the pass saw exactly T tokens
        planned = row["planned"]
        assert planned["above_state"] == max(planned["layer_moment"],
                                             planned["output_layer"] + planned["hidden"] + planned["logits"])
    assert result["hf_config"]["vocab_size"] > 0 and result["logprobs"] == "verl_recipes.runtime.logprobs"
