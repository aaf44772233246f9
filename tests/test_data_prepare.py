"""End to end: `python -m verl_recipes.data.prepare` on tiny local copies of each source, read back by verl 0.9.1."""

import json
import os
import subprocess
import sys
from io import BytesIO
from pathlib import Path
from types import SimpleNamespace

import datasets
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from omegaconf import OmegaConf
from PIL import Image

from verl_recipes.data import prepare
from verl_recipes.data.prompts import (
    DAPO_PREFIX,
    DAPO_SUFFIX,
    DEEPEYES_SYSTEM,
    RETOOL_INSTRUCTION,
    STEP_BY_STEP_BOXED,
    THINK_THEN_BOXED,
    code_interpreter_tool,
)

REPO = Path(__file__).resolve().parents[1]

# Qwen2.5's chat template, reduced to what the tests exercise (system default, tools, tool calls, tool turns).
QWEN_STYLE_TEMPLATE = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content }}
{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- '\n\n# Tools\n\n<tools>' }}
{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\n</tools><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first)
      or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}
{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""


@pytest.fixture(scope="module", autouse=True)
def isolated_hf_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf_cache"))
        yield


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=special, initial_alphabet=alphabet, show_progress=False
    )
    bpe.train_from_iterator([STEP_BY_STEP_BOXED, RETOOL_INSTRUCTION, DAPO_PREFIX, QWEN_STYLE_TEMPLATE] * 5, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=special[1:]
    )
    tok.chat_template = QWEN_STYLE_TEMPLATE
    return tok


def png(size) -> bytes:
    buffer = BytesIO()
    Image.new("RGB", size, "red").save(buffer, format="PNG")
    return buffer.getvalue()


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def prepare_run(*argv) -> int:
    return prepare.main([str(a) for a in argv])


def read(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def rl_dataset(files, tokenizer, tmp_path, processor=None):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(
        {
            "max_prompt_length": 2048,
            "filter_overlong_prompts": processor is None,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "verl_cache"),
        }
    )
    return RLHFDataset([str(f) for f in files], tokenizer, config, processor=processor)


# ------------------------------------------------------------------------------------------------ gsm8k_math


@pytest.fixture
def gsm8k_math_sources(tmp_path):
    gsm8k, math = tmp_path / "gsm8k", tmp_path / "math"  # gsm8k laid out like its hub snapshot: main/, socratic/
    write_jsonl(gsm8k / "socratic" / "train.jsonl", [{"question": "wrong config", "answer": "#### 0"}])
    write_jsonl(
        gsm8k / "main" / "train.jsonl",
        [
            {"question": "Natalia sold 48 clips. How many?", "answer": "48 + 24 = <<48+24=72>>72\n#### 72"},
            {"question": "A big sum?", "answer": "1000 + 234 = 1234\n#### 1,234"},
        ],
    )
    write_jsonl(gsm8k / "main" / "test.jsonl", [{"question": "Owes how much?", "answer": "#### -5"}])
    write_jsonl(
        math / "train.jsonl",
        [
            {"problem": "Half of 1?", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 1", "type": "A"},
            {"problem": "Set?", "solution": "$\\boxed{\\{1, 2\\}}$", "level": "Level 2", "type": "A"},
        ],
    )
    write_jsonl(math / "test.jsonl", [{"problem": "Root?", "solution": "\\boxed{\\sqrt{2}}"}])
    return ["--source", f"gsm8k={gsm8k}", "--source", f"math={math}"]


def test_gsm8k_math_rows_and_verl_reads_them(gsm8k_math_sources, tmp_path, tokenizer):
    out = tmp_path / "out"
    assert prepare_run("gsm8k_math", "--out", out, *gsm8k_math_sources) == 0
    train, test = read(out / "train.parquet"), read(out / "test.parquet")
    assert [r["data_source"] for r in train] == ["gsm8k_boxed"] * 2 + ["DigitalLearningGmbH/MATH-lighteval"] * 2
    # the pairing cannot break silently: verl's default scorer refuses our GSM8K rows instead of grading their
    # \boxed{} answers by its "####" rule (which scored every one 0), and our reward grades them
    from verl.utils.reward_score import default_compute_score

    from verl_recipes.rewards.math import compute_score

    gsm8k = train[0]
    with pytest.raises(NotImplementedError):
        default_compute_score(gsm8k["data_source"], "so \\boxed{72}", gsm8k["reward_model"]["ground_truth"])
    assert default_compute_score("openai/gsm8k", "so \\boxed{72}", "72") == 0  # what it did with verl's name
    assert compute_score(gsm8k["data_source"], "so \\boxed{72}", gsm8k["reward_model"]["ground_truth"])["acc"] == 1.0
    assert [r["reward_model"]["ground_truth"] for r in train] == ["72", "1234", "\\frac{1}{2}", "\\{1, 2\\}"]
    assert [r["reward_model"]["ground_truth"] for r in test] == ["-5", "\\sqrt{2}"]
    first = train[0]
    assert set(first) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert first["prompt"] == [{"role": "user", "content": f"Natalia sold 48 clips. How many? {STEP_BY_STEP_BOXED}"}]
    assert first["ability"] == "math"
    assert first["reward_model"]["style"] == "rule"
    assert [r["extra_info"]["index"] for r in train] == [0, 1, 2, 3]
    assert train[3]["extra_info"] == {
        "split": "train",
        "index": 3,
        "source_index": 1,
        "question": "Set?",
        "answer": "$\\boxed{\\{1, 2\\}}$",
    }

    dataset = rl_dataset([out / "train.parquet", out / "test.parquet"], tokenizer, tmp_path)
    assert len(dataset) == 6
    item = dataset[2]
    assert item["raw_prompt"][0]["content"].startswith("Half of 1?")
    assert item["reward_model"]["ground_truth"] == "\\frac{1}{2}"
    assert item["index"] == 2


def test_second_run_does_nothing_and_force_rebuilds(gsm8k_math_sources, tmp_path, capsys):
    out = tmp_path / "out"
    assert prepare_run("gsm8k_math", "--out", out, *gsm8k_math_sources) == 0
    assert prepare.outputs("gsm8k_math", out) == [out / "train.parquet", out / "test.parquet"]
    stamps = [p.stat().st_mtime_ns for p in prepare.outputs("gsm8k_math", out)]
    capsys.readouterr()

    assert prepare_run("gsm8k_math", "--out", out, *gsm8k_math_sources) == 0
    assert "already prepared" in capsys.readouterr().out
    assert [p.stat().st_mtime_ns for p in prepare.outputs("gsm8k_math", out)] == stamps

    assert prepare_run("gsm8k_math", "--out", out, "--force", *gsm8k_math_sources) == 0
    assert "read 2, written 2 -> train.parquet" in capsys.readouterr().out
    assert [p.stat().st_mtime_ns for p in prepare.outputs("gsm8k_math", out)] != stamps
    assert sorted(p.name for p in out.iterdir()) == ["prepare_report.json", "test.parquet", "train.parquet"]


def test_default_out_dir_is_rl_data_dir(gsm8k_math_sources, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_DATA_DIR", str(tmp_path / "data"))
    assert prepare.outputs("dapo_math") == [
        tmp_path / "data" / "dapo_math" / name for name in ("train.parquet", "aime2024.parquet", "aime2025.parquet")
    ]
    assert prepare_run("gsm8k_math", *gsm8k_math_sources) == 0
    assert all(p.exists() for p in prepare.outputs("gsm8k_math"))
    monkeypatch.delenv("RL_DATA_DIR")
    assert prepare.outputs("geo3k")[0] == REPO / "data" / "geo3k" / "train.parquet"


def test_bad_rows_are_reported_and_the_threshold_decides(gsm8k_math_sources, tmp_path, capsys):
    gsm8k = Path(gsm8k_math_sources[1].split("=", 1)[1])
    write_jsonl(
        gsm8k / "main" / "train.jsonl",
        [
            {"question": "Fine?", "answer": "#### 3"},
            {"question": "No marker?", "answer": "the answer is 3"},
            {"question": "Words?", "answer": "#### three"},
            {"question": None, "answer": "#### 4"},
        ],
    )
    out = tmp_path / "out"
    assert prepare_run("gsm8k_math", "--out", out, *gsm8k_math_sources) == 1
    captured = capsys.readouterr()
    assert "bad row 1: answer has no '####' final-answer marker" in captured.out
    assert "bad row 2: final answer 'three' after '####' is not a number" in captured.out
    assert "bad row 3: column 'question' is NoneType" in captured.out
    assert "3 bad of 4 rows exceeds --max-bad-fraction 0.01" in captured.err
    assert not (out / "train.parquet").exists() and not (out / "test.parquet").exists()
    assert not list(out.glob("*.tmp*"))
    report = json.loads((out / "prepare_report.json").read_text())
    assert report["passed"] is False
    assert [b["index"] for b in report["sources"][0]["bad"]] == [1, 2, 3]

    assert prepare_run("gsm8k_math", "--out", out, "--max-bad-fraction", "0.8", *gsm8k_math_sources) == 0
    assert [r["extra_info"]["question"] for r in read(out / "train.parquet")][:1] == ["Fine?"]
    assert len(read(out / "train.parquet")) == 3  # 1 gsm8k + 2 MATH


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"q": "x", "answer": "#### 1"}], "lacks column(s) ['question']"),
        ([{"question": "x", "answer": "#### 1"}], "expected a 'test' split"),
    ],
)
def test_source_errors_name_the_problem(tmp_path, rows, message, capsys):
    write_jsonl(tmp_path / "gsm8k" / "train.jsonl", rows)
    if "q" in rows[0]:
        write_jsonl(tmp_path / "gsm8k" / "test.jsonl", rows)
    math = tmp_path / "math"
    write_jsonl(math / "train.jsonl", [{"problem": "p", "solution": "\\boxed{1}"}])
    write_jsonl(math / "test.jsonl", [{"problem": "p", "solution": "\\boxed{1}"}])
    sources = ["--source", f"gsm8k={tmp_path / 'gsm8k'}", "--source", f"math={math}"]
    assert prepare_run("gsm8k_math", "--out", tmp_path / "out", *sources) == 1
    err = capsys.readouterr().err
    assert "gsm8k_math:" in err and message in err
    assert not (tmp_path / "out" / "train.parquet").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["gsm8k_math", "--source", "/some/dir"], "name the part: --source PART=PATH with PART one of gsm8k, math"),
        (["gsm8k_math", "--source", "gsm8k=/no/such/dir"], "--source for part 'gsm8k' is /no/such/dir"),
        (["nope"], "unknown dataset 'nope'; known: gsm8k_math, geo3k, dapo_math"),
    ],
)
def test_argument_errors(argv, message, capsys, tmp_path):
    assert prepare_run(*argv, "--out", tmp_path) == 1
    assert message in capsys.readouterr().err


def test_cli_without_network_says_to_use_source(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "verl_recipes.data.prepare", "geo3k", "--out", str(tmp_path / "out")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "geo3k: cannot load part 'geo3k' from hiyouga/geometry3k" in result.stderr
    assert "--source geo3k=PATH" in result.stderr
    assert not (tmp_path / "out" / "train.parquet").exists()


# ------------------------------------------------------------------------------------------------ geo3k


def test_geo3k_keeps_images_for_verl(tmp_path, tokenizer):
    features = datasets.Features(
        {
            "images": datasets.List(datasets.Image()),
            "problem": datasets.Value("string"),
            "answer": datasets.Value("string"),
        }
    )
    train = {
        "images": [
            [{"bytes": png((64, 48)), "path": None}],
            [{"bytes": png((40, 40)), "path": None}, {"bytes": png((30, 50)), "path": None}],
            [{"bytes": png((10, 20)), "path": None}],
            [{"bytes": b"broken", "path": None}],
        ],
        "problem": ["<image>Find x.", "<image><image>Which is larger?", "Find y.", "<image>Find z."],
        "answer": ["3", "A", "2\\sqrt{3}", "1"],
    }
    test = {"images": [[{"bytes": png((50, 50)), "path": None}]], "problem": ["<image>Find w."], "answer": ["5"]}
    source = tmp_path / "geo3k"
    source.mkdir()
    datasets.Dataset.from_dict(train, features=features).to_parquet(source / "train.parquet")
    datasets.Dataset.from_dict(test, features=features).to_parquet(source / "test.parquet")

    out = tmp_path / "out"
    assert prepare_run("geo3k", "--out", out, "--source", source) == 1  # 1 bad of 4 > 1%
    assert prepare_run("geo3k", "--out", out, "--source", source, "--max-bad-fraction", "0.3") == 0
    report = json.loads((out / "prepare_report.json").read_text())["sources"][0]
    assert report["bad"] == [{"index": 3, "reason": report["bad"][0]["reason"]}]
    assert report["bad"][0]["reason"].startswith("image does not decode")
    assert report["notes"] == {"image upscaled to sides >= 28 px": 1, "<image> placeholder prepended": 1}

    rows = read(out / "train.parquet")
    assert [r["prompt"][0]["content"] for r in rows] == [
        f"<image>Find x. {THINK_THEN_BOXED}",
        f"<image><image>Which is larger? {THINK_THEN_BOXED}",
        f"<image>\nFind y. {THINK_THEN_BOXED}",
    ]
    assert [len(r["images"]) for r in rows] == [1, 2, 1]
    assert rows[0]["images"][0]["bytes"] == png((64, 48))
    assert Image.open(BytesIO(rows[2]["images"][0]["bytes"])).size == (28, 56)
    assert rows[0]["data_source"] == "hiyouga/geometry3k"
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["3", "A", "2\\sqrt{3}"]
    assert len(read(out / "test.parquet")) == 1

    # verl needs a processor for image rows; its message building only checks that one is given.
    dataset = rl_dataset([out / "train.parquet"], tokenizer, tmp_path, processor=SimpleNamespace())
    content = dataset[1]["raw_prompt"][0]["content"]
    assert [part["type"] for part in content] == ["image", "image", "text"]
    assert content[1]["image"].size == (30, 50)
    assert dataset[2]["raw_prompt"][0]["content"][0]["image"].size == (28, 56)


# ------------------------------------------------------------------------------------------------ dapo_math


@pytest.fixture
def dapo_sources(tmp_path):
    def dapo(problem, answer):
        return {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": DAPO_PREFIX + problem + DAPO_SUFFIX}],
            "ability": "MATH",
            "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": "uuid"},
        }

    rows = [dapo("What is $1+1$?", "2"), dapo("What is $2+2$?", "4"), dapo("What is $1+1$?", "2")]
    rows += [dapo("What is $1+1$?", "2"), dapo("Find $n$.", "34")]
    rows += [{**dapo("x", "1"), "prompt": [{"role": "user", "content": "Just solve it."}]}]
    (tmp_path / "dapo").mkdir()
    pd.DataFrame(rows).to_parquet(tmp_path / "dapo" / "dapo-math-17k.parquet")
    aime2024 = [{"ID": "2024-I-1", "Problem": "Every morning Aya walks.", "Solution": "...", "Answer": 204}]
    datasets.Dataset.from_list(aime2024).save_to_disk(tmp_path / "aime2024")
    write_jsonl(
        tmp_path / "aime2025.jsonl",
        [{"id": 0, "problem": "Find the sum of bases.", "answer": "070", "url": "u", "year": 2025}],
    )
    return [
        "--source", f"dapo={tmp_path / 'dapo'}",
        "--source", f"aime2024={tmp_path / 'aime2024'}",
        "--source", f"aime2025={tmp_path / 'aime2025.jsonl'}",
        "--max-bad-fraction", "0.2",
    ]  # fmt: skip


def test_dapo_math_keeps_the_dapo_template(dapo_sources, tmp_path, capsys):
    out = tmp_path / "out"
    assert prepare_run("dapo_math", "--out", out, *dapo_sources) == 0
    printed = capsys.readouterr().out
    assert "read 6, written 3 -> train.parquet, bad 1; skipped 2 (duplicate of an earlier row)" in printed
    assert "bad row 5: prompt does not follow the DAPO-Math template" in printed
    train = read(out / "train.parquet")
    assert [r["prompt"][0]["content"] for r in train] == [
        DAPO_PREFIX + p + DAPO_SUFFIX for p in ("What is $1+1$?", "What is $2+2$?", "Find $n$.")
    ]
    assert [r["reward_model"]["ground_truth"] for r in train] == ["2", "4", "34"]
    assert {r["data_source"] for r in train} == {"math_dapo"}
    assert "agent_name" not in train[0]
    aime24, aime25 = read(out / "aime2024.parquet"), read(out / "aime2025.parquet")
    assert aime24[0]["prompt"][0]["content"] == DAPO_PREFIX + "Every morning Aya walks." + DAPO_SUFFIX
    assert (aime24[0]["data_source"], aime24[0]["reward_model"]["ground_truth"]) == ("aime2024", "204")
    assert (aime25[0]["data_source"], aime25[0]["reward_model"]["ground_truth"]) == ("aime2025", "70")


def test_dapo_math_retool_rows_run_the_tool_agent(dapo_sources, tmp_path, tokenizer):
    out = tmp_path / "out"
    assert prepare_run("dapo_math_retool", "--out", out, *dapo_sources) == 0
    files = prepare.outputs("dapo_math_retool", out)
    rows = [row for f in files for row in read(f)]
    assert len(rows) == 5
    assert {r["agent_name"] for r in rows} == {"tool_agent"}
    assert rows[0]["prompt"] == [{"role": "user", "content": "What is $1+1$?" + RETOOL_INSTRUCTION}]
    assert "code_interpreter" in RETOOL_INSTRUCTION and "\\boxed{}" in RETOOL_INSTRUCTION

    dataset = rl_dataset(files, tokenizer, tmp_path)
    assert len(dataset) == 5
    assert dataset[4]["agent_name"] == "tool_agent"
    assert dataset[4]["raw_prompt"][0]["content"].startswith("Find the sum of bases.")


# ------------------------------------------------------------------------------------------------ retool_sft

RETOOL_USER = (
    "Solve the following problem step by step. ...\n\n*user question:*\n{q}\n\n"
    "Remember to place the final answer in the last part using the format: \n<answer>\n\\boxed{{'...'}}\n</answer>"
)


def test_retool_sft_messages_train_on_assistant_turns(tmp_path, tokenizer):
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    reply = (
        "Compute it.\n<code>\n```python\nprint(2**10)\n```\n</code>\n<interpreter>\nOUT-1024\n</interpreter>\n\n"
        "So the answer is\n<answer>\n\\boxed{1024}\n</answer>"
    )
    rows = [
        {"messages": [{"role": "user", "content": RETOOL_USER.format(q=q)}, {"role": "assistant", "content": a}]}
        for q, a in (("What is 2**10?", reply), ("Bad?", "<code>x"))
    ]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(tmp_path / "retool")
    out = tmp_path / "out"
    assert prepare_run("retool_sft", "--out", out, "--source", tmp_path / "retool", "--max-bad-fraction", "0.5") == 0
    (row,) = read(out / "train.parquet")
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert row["messages"][0]["content"] == "What is 2**10?" + RETOOL_INSTRUCTION
    call = {"name": "code_interpreter", "arguments": {"code": "print(2**10)"}}
    assert row["messages"][1]["tool_calls"][0]["function"] == call
    assert row["tools"] == [code_interpreter_tool()]
    # the system prompt the model sees: verl's SFT dataset renders the row's tools as read back from parquet, verl's
    # tool agent renders the RL tool config's schemas; both must be the same text
    from verl.tools.schemas import OpenAIFunctionToolSchema
    from verl.utils.dataset.multiturn_sft_dataset import convert_nested_value_to_list_recursive

    user = [row["messages"][0]]
    sft_tools = convert_nested_value_to_list_recursive(row["tools"])
    rl_config = yaml.safe_load((REPO / "agents/code_interpreter.yaml").read_text())
    rl_tools = [OpenAIFunctionToolSchema.model_validate(t["tool_schema"]).model_dump(exclude_unset=True, exclude_none=True)
                for t in rl_config["tools"]]
    sft_prompt = tokenizer.apply_chat_template(user, tools=sft_tools, tokenize=False)
    assert '"name": "code_interpreter"' in sft_prompt
    assert sft_prompt == tokenizer.apply_chat_template(user, tools=rl_tools, tokenize=False)

    config = OmegaConf.create({"max_length": 4096, "truncation": "error", "pad_mode": "no_padding"})
    item = MultiTurnSFTDataset([str(out / "train.parquet")], tokenizer, config)[0]
    trained = tokenizer.decode(item["input_ids"][item["loss_mask"].bool()])
    assert '"arguments": {"code": "print(2**10)"}' in trained
    assert "\\boxed{1024}" in trained
    assert "OUT-1024" not in trained and "What is 2**10?" not in trained
    assert "OUT-1024" in tokenizer.decode(item["input_ids"])


# ------------------------------------------------------------------------------------------------ deepeyes


def test_deepeyes_drops_chart_upscales_and_runs_tool_agent(tmp_path, tokenizer, capsys):
    def row(subset, question, size, answer="red"):
        return {
            "data_source": subset,
            "prompt": [
                {"role": "system", "content": "You may call image_zoom_in_tool ..."},
                {"role": "user", "content": f"<image>\n{question} Think first, then answer."},
            ],
            "images": [{"bytes": png(size), "path": None}],
            "ability": "vl_chart" if subset == "chart" else "vl",
            "env_name": "visual_toolbox_v2",
            "reward_model": {"ground_truth": answer, "style": "model"},
            "extra_info": {"question": question, "answer": answer, "index": "7"},
        }

    source = tmp_path / "deepeyes"
    source.mkdir()
    vstar = [row("vstar", "Car color?", (64, 64)), row("chart", "Peak?", (64, 64)), row("vstar", "Sign?", (40, 30))]
    vstar += [row("vstar", "Cup?", (32, 32), answer="")]
    pd.DataFrame(vstar).to_parquet(source / "data_0.1.2_visual_toolbox_v2.parquet")
    thinklite = [row("thinklite_eureka", "Angle?", (10, 20), "30"), row("thinklite_eureka", "Area?", (50, 40), "6")]
    pd.DataFrame(thinklite).to_parquet(source / "data_thinklite_reasoning_acc.parquet")
    pd.DataFrame([row("chart", "CHART FILE", (64, 64))]).to_parquet(source / "data_v0.8_visual_toolbox_v2.parquet")

    out = tmp_path / "out"
    assert prepare_run("deepeyes", "--out", out, "--source", source, "--max-bad-fraction", "0.3") == 0
    printed = capsys.readouterr().out
    assert "read 4, written 1 -> test.parquet, 1 -> train.parquet, bad 1; skipped 1 ('chart' subset excluded)" in (
        printed
    )
    assert "bad row 3: reward_model.ground_truth is missing or empty" in printed
    test, train = read(out / "test.parquet"), read(out / "train.parquet")
    assert [r["extra_info"]["question"] for r in test] == ["Car color?", "Angle?"]
    assert [r["extra_info"]["question"] for r in train] == ["Sign?", "Area?"]
    assert [r["data_source"] for r in test] == ["vstar", "thinklite_eureka"]
    assert {r["agent_name"] for r in test + train} == {"tool_agent"}
    assert test[1]["prompt"] == [
        {"role": "system", "content": DEEPEYES_SYSTEM},
        {"role": "user", "content": "<image>\nAngle? Think first, then answer."},
    ]
    assert Image.open(BytesIO(test[1]["images"][0]["bytes"])).size == (28, 56)
    assert test[1]["reward_model"] == {"style": "rule", "ground_truth": "30"}

    files = [out / "train.parquet", out / "test.parquet"]
    dataset = rl_dataset(files, tokenizer, tmp_path, processor=SimpleNamespace())
    assert len(dataset) == 4
    item = dataset[3]
    assert item["agent_name"] == "tool_agent"
    assert item["raw_prompt"][1]["content"][0]["image"].size == (28, 56)
