"""GPU check of verl_recipes/runtime/sglang_models: SGLang 0.5.12's own engine, on the transformers 5.9.0 that verl
0.9.1 pins, serves a Qwen2.5-VL request with an image only when SGLANG_EXTERNAL_MODEL_PACKAGE names the package.

    eval "$(bash tests/gpu/pack_sglang.sh env)" && python3 tests/gpu/sglang_vl_check.py [MODEL_DIR]

MODEL_DIR (default /tmp/sglang_vl_check) gets the tiny random Qwen2.5-VL of the VL recipes' smokes when it holds no
model yet (python -m verl_recipes.smoke.tiny). Then SGLang's offline Engine runs in a child process twice, one
request of one image each: without the variable (the tiny VL smoke's failure must show, the scheduler dying in the
vision tower's rotary embedding) and with it (the request must come back with its tokens). No verl, no Ray, no CUDA
graphs, Triton attention and PyTorch sampling: a start of seconds instead of the smoke's four minutes, and no
flashinfer compilation. Writes $OUT/sglang_vl_check.json; exits 1 unless both runs went as expected.
On 1 x H200, 2026-12-01: PASS, the control dying as the smoke did after 66 s, the patched engine answering after 129 s
(results/sglang_vl_check.qwen2_5_vl-tiny-h200.json); the whole call took 231 s with the SGLang layers' install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "verl_recipes.runtime.sglang_models"
FAILURE = "Expected all tensors to be on the same device"  # the smoke's error (results/smoke/*.sglang.3.*)
CHILD_TIMEOUT_S = 150
PROMPT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is the angle?<|im_end|>\n<|im_start|>assistant\n"


def child(model: str) -> None:
    """One SGLang engine, one request with an image; prints the answer's token ids as the last line."""
    import sglang
    from PIL import Image

    engine = sglang.Engine(model_path=model, mem_fraction_static=0.3, disable_cuda_graph=True,
                           attention_backend="triton", sampling_backend="pytorch", log_level="warning")
    image = Image.new("RGB", (224, 224), (120, 30, 200))
    out = engine.generate(prompt=PROMPT, image_data=[image], sampling_params={"max_new_tokens": 8, "temperature": 0})
    engine.shutdown()
    print(json.dumps({"output_ids": out["output_ids"]}))


def run(model: Path, package: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_EXTERNAL_MODEL_PACKAGE"}
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    if package:
        env["SGLANG_EXTERNAL_MODEL_PACKAGE"] = package
    start = time.time()
    try:
        done = subprocess.run([sys.executable, __file__, "--child", str(model)], env=env, capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S)
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = None, e.stdout or "", e.stderr or ""
    last = (stdout.strip().splitlines() or [""])[-1]
    answer = json.loads(last) if rc == 0 and last.startswith("{") else None
    return {"package": package, "rc": rc, "seconds": round(time.time() - start, 1),
            "tokens": len(answer["output_ids"]) if answer else 0, "rotary_failure": FAILURE in stderr,
            "stderr_tail": stderr[-3000:]}


def verdict(control: dict, patched: dict) -> list[str]:
    """What went other than expected: the control must fail as the smoke did, the patched run must answer."""
    failures = []
    if control["rc"] == 0 or not control["rotary_failure"]:
        failures.append("without the package the engine did not fail in the vision rotary embedding: the check "
                        "cannot tell the shim's work from a changed SGLang or transformers")
    if patched["rc"] != 0 or not patched["tokens"]:
        failures.append(f"with {PACKAGE} the request did not come back (rc {patched['rc']})")
    return failures


def main() -> int:
    model = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sglang_vl_check")
    if not (model / "model" / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "verl_recipes.smoke.tiny", str(model), "--recipe",
                        "qwen25-vl-7b-geo3k-dapo"], check=True, cwd=REPO)
    import torch

    control, patched = run(model / "model", None), run(model / "model", PACKAGE)
    failures = verdict(control, patched)
    record = {"check": "sglang_vl", "hardware": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"),
              "control": control, "patched": patched, "passed": not failures, "failures": failures}
    for name, result in (("without the package", control), ("with it", patched)):
        print(f"{name}: rc {result['rc']}, {result['tokens']} tokens, rotary failure {result['rotary_failure']}, "
              f"{result['seconds']} s")
    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "sglang_vl_check.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0 if not failures else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        sys.exit(main())
