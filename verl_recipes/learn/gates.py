"""Gates of a learning run, read from verl's metrics (verl_recipes/check/gates.read_metrics).

- score: the mean training score of the last 5 steps is >= the warm-up's baseline + 0.3, and >= the mean of the
  first 3 steps + 0.25;
- validation: greedy validation on the fixed prompts gains >= 0.25 from before training to the last validation;
- agreement: at every step, verl's train/rollout metrics stay within AGREEMENT_LESS_PEARSON (calibrated on the
  committed runs, results/learn/README.md): a weight push that does not reach the rollout, or a mismatched rollout, breaks them.
  In bypass mode (the async variants) verl recomputes no old log-probs, so those metrics do not exist; the PPO
  ratio's KL (`actor/ppo_kl`, rollout log-probs vs the trainer's, before the step's update) stands in, with a
  bound that allows the one policy version of staleness the async variants run with;
- tool (tool tasks): `num_turns/mean` rises by >= TOOL_RISE (each tool round adds 2 turns).
A negative control must fail its gate: labels shuffled, the score gate; the rollout's weights left stale (a weight
push that stops reaching vLLM, verl_recipes/runtime/faults.py), an agreement gate.
"""

from __future__ import annotations

import math

from verl_recipes.check.gates import AGREEMENT_LESS_PEARSON, PEARSON, SIDES

SCORE = "critic/score/mean"
TURNS = "num_turns/mean"
LAST, FIRST = 5, 3
OVER_BASELINE, OVER_START, VAL_GAIN = 0.3, 0.25, 0.25
TOOL_RISE = 0.3
# bypass mode: |KL(rollout || trainer)| with up to one version of staleness (worst on the committed run: 0.030)
BYPASS_AGREEMENT = (("actor/ppo_kl", 0.05, "abs"),)
# Agreement is gated less the Pearson correlation of the two sides' token probabilities (AGREEMENT_LESS_PEARSON),
# which a learning run reports but does not gate: as a policy grows sure of its answers nearly every probability sits near 1, and the
# correlation then follows the few uncertain tokens' bf16 noise, not a mismatch. SmolLM2's run (2026-11-27) fell
# under 0.99 at 10 of 50 steps, each with a probability difference of at most 0.0013 and a k3 KL of at most 0.0005,
# a fifth of step 1's (0.0063, correlation 0.9991). A stale rollout breaks the two kept metrics: the stale control.


def validation_key(steps: dict[int, dict]) -> str | None:
    """verl's greedy validation accuracy, `val-core/<data_source>/acc/mean@1`."""
    keys = sorted({k for d in steps.values() for k in d if k.startswith("val-core/") and k.endswith("/acc/mean@1")})
    return keys[0] if keys else None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def curves(steps: dict[int, dict]) -> dict:
    """Score per training step and validation accuracy per validated step (0: before training)."""
    key = validation_key(steps)
    return {"score": {s: d[SCORE] for s, d in sorted(steps.items()) if SCORE in d},
            "validation": {s: d[key] for s, d in sorted(steps.items()) if key and key in d},
            "turns": {s: d[TURNS] for s, d in sorted(steps.items()) if TURNS in d}, "validation_key": key}


def evaluate(steps: dict[int, dict], baseline: float, tool: bool, bypass: bool = False) -> dict:
    """{gate: {"passed": bool, "detail": str}} for every gate, plus the figures behind them. `bypass`: the run's
    algorithm.rollout_correction.bypass_mode (agreement then reads BYPASS_AGREEMENT)."""
    c = curves(steps)
    score = list(c["score"].values())
    last, first = _mean(score[-LAST:]), _mean(score[:FIRST])
    gates = {}
    enough = len(score) >= LAST + FIRST

    def gate(name: str, passed: bool, detail: str) -> None:
        gates[name] = {"passed": bool(passed), "detail": detail}

    gate("score over baseline", enough and last >= baseline + OVER_BASELINE,
         f"last {LAST} steps {last:.3f} vs baseline {baseline:.3f} + {OVER_BASELINE} ({len(score)} steps)")
    gate("score over start", enough and last >= first + OVER_START,
         f"last {LAST} steps {last:.3f} vs first {FIRST} {first:.3f} + {OVER_START}")
    val = list(c["validation"].values())
    gain = val[-1] - val[0] if len(val) >= 2 else math.nan
    gate("validation gain", len(val) >= 2 and gain >= VAL_GAIN,
         f"{c['validation_key']}: {val[0] if val else 'none'} -> {val[-1] if val else 'none'} (gain {gain:.3f})")
    trained = [s for s in steps if SCORE in steps[s]]
    for metric, bound, side in BYPASS_AGREEMENT if bypass else AGREEMENT_LESS_PEARSON:
        holds, worst_of = SIDES[side]
        values = {s: steps[s].get(metric) for s in trained}
        bad = {s: v for s, v in values.items() if v is None or not holds(v, bound)}
        seen = [v for v in values.values() if v is not None]
        worst = worst_of(seen) if seen else None
        gate(f"agreement {metric}", trained and not bad,
             f"worst {worst} ({side} {bound})" + (f"; out of bounds or missing at steps {sorted(bad)}" if bad else ""))
    if tool:
        turns = list(c["turns"].values())
        rise = _mean(turns[-LAST:]) - _mean(turns[:FIRST])
        gate("tool use rises", len(turns) >= LAST + FIRST and rise >= TOOL_RISE,
             f"{TURNS}: first {FIRST} {_mean(turns[:FIRST]):.2f} -> last {LAST} {_mean(turns[-LAST:]):.2f} (rise {rise:.2f})")
    pearson = [steps[s][PEARSON] for s in trained if PEARSON in steps[s]]
    return {"gates": gates, "last_score": last, "first_score": first, "baseline": baseline,
            "validation_gain": gain, "pearson_worst": min(pearson) if pearson else None, "curves": c}


def learned(result: dict) -> bool:
    return all(g["passed"] for g in result["gates"].values())


def score_gate_failed(result: dict) -> bool:
    """What a negative control must show: its score did not rise (either score gate fails)."""
    return not (result["gates"]["score over baseline"]["passed"] and result["gates"]["score over start"]["passed"])


def agreement_failed(result: dict) -> bool:
    """What the stale-weights control must show: an agreement gate fails."""
    return not all(g["passed"] for name, g in result["gates"].items() if name.startswith("agreement "))


# what a run of each control must show to pass (build --control): none learns, the others fail their gate
EXPECTED = {"none": learned, "shuffled": score_gate_failed, "stale": agreement_failed}

# Gates that runs were graded by and no longer are: a committed record is counted as today's gates grade it
RETIRED = (f"agreement {PEARSON}",)


def passes(record: dict) -> bool:
    """Whether a committed learn.json shows what its control must under the gates in force: it exited 0 and its
    recorded gates, less RETIRED ones, say so. Its own `passed` stays what it was graded at the time (SmolLM2's first
    run failed the correlation gate only, 2026-11-27, and counts as a pass since)."""
    kept = {name: gate for name, gate in record.get("gates", {}).items() if name not in RETIRED}
    return not record["rc"] and bool(kept) and EXPECTED[record["control"]]({**record, "gates": kept})
