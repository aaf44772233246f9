"""Every instruction text and tool schema the prepared datasets put into prompts, in one place."""

from verl_recipes import yaml_parser
from verl_recipes.catalog import REPO

# gsm8k_math (verl examples/data_preprocess/math_dataset.py); appended after a space.
STEP_BY_STEP_BOXED = "Let's think step by step and output the final answer within \\boxed{}."

# geo3k (verl examples/data_preprocess/geo3k.py); appended after a space.
THINK_THEN_BOXED = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <think> </think> tags. "
    "The final answer MUST BE put in \\boxed{}."
)

# The template every DAPO-Math-17k prompt has; dapo_math puts AIME problems into it too.
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

# ReTool: the RL prompts (dapo_math_retool) and the SFT user turns (retool_sft) are problem + this, so the
# model meets in RL the prompt it was fine-tuned on.
RETOOL_INSTRUCTION = (
    "\n\nSolve the problem step by step. You can call the code_interpreter tool to run Python code for "
    "calculations and checks. Put the final answer within \\boxed{}."
)

# The tool the ReTool SFT data calls: its schema is read from the RL tool config, the one source of what the model
# is shown in both stages.
CODE_INTERPRETER_CONFIG = REPO / "agents/code_interpreter.yaml"


def code_interpreter_tool() -> dict:
    return yaml_parser.safe_load(CODE_INTERPRETER_CONFIG.read_text())["tools"][0]["tool_schema"]


# DeepEyes: replaces the dataset's own system prompt, which spells the tool out in text; with verl's tool
# agent the chat template renders the tools from the tool config (verl-recipe deepeyes.py injects this text).
DEEPEYES_SYSTEM = (
    "You are a helpful assistant. You can call functions to assist with the user query. "
    "Important: You must call only one function at a time. After each function call, "
    "wait for the execution result before making the next function call if needed."
)
