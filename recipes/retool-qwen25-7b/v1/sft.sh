#!/usr/bin/env bash
# ReTool cold start: supervised fine-tuning of Qwen2.5-7B-Instruct on ReTool-SFT's code-interpreter transcripts
# (verl_recipes/data retool_sft: messages + tools, the same user turn and tool schema the RL stage uses), on one node of
# 8 GPUs with verl 0.9.1's own SFT trainer and config (verl/trainer/config/sft_trainer_engine.yaml), following
# verl-recipe's retool/run_qwen2_7b_sft.sh (max length 16384, 32 conversations per step, 6 epochs; its
# fsdp_sft_trainer is gone from 0.9.1). Every override below is composed against the installed verl by
# tests/test_agent_recipes.py. `make retool-qwen25-7b` then starts RL from the newest checkpoint this writes
# (card cold_start; SFT_CHECKPOINT=<dir> picks another).
# Usage:
#   bash recipes/retool-qwen25-7b/v1/sft.sh [hydra overrides ...]   train (prepares data/retool_sft when missing)
#   SFT_PRINT_OVERRIDES=1 bash recipes/retool-qwen25-7b/v1/sft.sh   print the overrides one per line, run nothing
# Environment: RL_DATA_DIR, RL_RUNS_DIR (as for every recipe), NPROC_PER_NODE (default 8), and the interpreter make
# uses: PY, else $VENV/bin/python (VENV default .venv, relative to the repository), as in the Makefile.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
VENV=${VENV:-.venv}
[[ $VENV == /* ]] || VENV=$REPO/$VENV
PYTHON=${PY:-$VENV/bin/python}
DATA=${RL_DATA_DIR:-$REPO/data}/retool_sft/train.parquet
RUN=${RL_RUNS_DIR:-$REPO/runs}/retool-qwen25-7b-v1-sft
GPUS=${NPROC_PER_NODE:-8}

OVERRIDES=(
  "data.train_files=$DATA"
  data.val_files=null
  # MultiTurnSFTDataset: the chat template renders the tool schemas and the tool turns; loss on assistant turns only
  data.messages_key=messages
  data.tools_key=tools
  # the longest transcripts; a longer one stops the run with its length instead of training on a cut answer
  data.max_length=16384
  data.truncation=error
  # 32 conversations per step (about 62 steps per epoch on ReTool-SFT's ~2k rows)
  data.train_batch_size=32
  # packed, dynamic micro-batches of up to one longest conversation per GPU
  data.pad_mode=no_padding
  data.use_dynamic_bsz=true
  data.max_token_len_per_gpu=16384
  model.path=Qwen/Qwen2.5-7B-Instruct
  model.use_remove_padding=true
  model.enable_gradient_checkpointing=true
  engine.strategy=fsdp2
  # the fsdp_sft_trainer defaults verl-recipe ran with: lr 1e-5, 10% warm-up, cosine decay, weight decay 0.01
  optim.lr=1e-5
  optim.lr_warmup_steps_ratio=0.1
  optim.lr_scheduler_type=cosine
  optim.weight_decay=0.01
  optim.clip_grad=1.0
  # hf_model: a plain Hugging Face folder (weights, config, tokenizer) that the RL recipe loads as its model
  "checkpoint.save_contents=[model,optimizer,extra,hf_model]"
  trainer.total_epochs=6
  # one checkpoint, at the end: a 7B checkpoint with its optimizer is ~90 GB
  trainer.save_freq=-1
  trainer.test_freq=-1
  "trainer.default_local_dir=$RUN/checkpoints"
  trainer.project_name=retool-qwen25-7b
  trainer.experiment_name=retool-qwen25-7b-v1-sft
  "trainer.logger=[console,file]"
  trainer.nnodes=1
  "trainer.n_gpus_per_node=$GPUS"
  "$@"
)

if [[ -n "${SFT_PRINT_OVERRIDES:-}" ]]; then
  printf '%s\n' "${OVERRIDES[@]}"
  exit 0
fi

if [[ ! -f "$DATA" ]]; then
  (cd "$REPO" && "$PYTHON" -m verl_recipes.data.prepare retool_sft)
fi
mkdir -p "$RUN"
VERL_FILE_LOGGER_PATH="$RUN/metrics.jsonl" "$PYTHON" -m torch.distributed.run --standalone --nnodes=1 \
  --nproc_per_node="$GPUS" -m verl.trainer.sft_trainer "${OVERRIDES[@]}" "hydra.run.dir=$RUN/hydra"

LAST=$(printf '%s\n' "$RUN"/checkpoints/global_step_* | sort -V | tail -n 1)
echo "cold start done: $LAST/huggingface; \`make retool-qwen25-7b\` now starts RL from it"
