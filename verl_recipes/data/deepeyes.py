"""deepeyes: ChenShawn/DeepEyes-Datasets-47k for verl's tool agent (image zoom-in), images kept.

What is done, and why (following the DeepEyes authors and verl-recipe's deepeyes README):
- The "chart" subset is dropped: its images are very large multi-plot figures, and even zoomed-in crops stay
  large enough to run a single node out of memory. Its file (data_v0.8_visual_toolbox_v2.parquet) is not
  read, and rows whose data_source is "chart" in the files that are read are skipped and counted.
- Images with a side under 28 px (many in the thinklite subset) are upscaled, aspect kept, so both sides are
  >= 28 px: Qwen2-VL's image processor rejects smaller ones at data loading (see images.py).
- The dataset's system prompt is replaced by DEEPEYES_SYSTEM; the user turn (with its <image> placeholder and
  answer-format instruction) is kept; agent_name is "tool_agent".
- data_source keeps the subset name ("vstar", "thinklite_eureka") so validation metrics split by subset;
  the reward must handle both (DeepEyes scores thinklite_eureka as math).
- No image copy goes into extra_info.tools_kwargs: in verl 0.9.1 the tool agent passes `agent_data` to
  BaseTool.execute, whose image_data holds the row's images as the model saw them (after the processor's
  resize, the frame the model's bbox coordinates refer to).
- There is no published validation split: every 50th kept row of each file (the first included) goes to
  test.parquet, the rest to train.parquet; deterministic for a given source.
"""

from verl_recipes.data.common import BadRow, Part, Skip, Spec, Stream
from verl_recipes.data.images import IMAGE, checked_images, with_placeholders
from verl_recipes.data.prompts import DEEPEYES_SYSTEM

DEEPEYES = "ChenShawn/DeepEyes-Datasets-47k"
FILES = {
    "vstar": "data_0.1.2_visual_toolbox_v2.parquet",
    "thinklite": "data_thinklite_reasoning_acc.parquet",
}  # the third file, data_v0.8_visual_toolbox_v2.parquet, is the chart subset
EXCLUDED_SUBSETS = ("chart",)
TEST_EVERY = 50


def deepeyes_row(row: dict, note) -> dict:
    subset = str(row.get("data_source") or "")
    if subset in EXCLUDED_SUBSETS:
        raise Skip(f"'{subset}' subset excluded")
    users = [m for m in row["prompt"] or [] if isinstance(m, dict) and m.get("role") == "user"]
    if len(users) != 1 or not isinstance(users[0].get("content"), str) or not users[0]["content"].strip():
        raise BadRow("prompt has no single non-empty user turn")
    reward_model = row["reward_model"] if isinstance(row["reward_model"], dict) else {}
    answer = reward_model.get("ground_truth")
    if not isinstance(answer, str) or not answer.strip():
        raise BadRow("reward_model.ground_truth is missing or empty")
    images = checked_images(row["images"], note)
    user_text = with_placeholders(users[0]["content"], len(images), note)
    source_info = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    question = source_info.get("question") or user_text.replace(IMAGE, "").strip()
    return {
        "data_source": subset or DEEPEYES,
        "prompt": [{"role": "system", "content": DEEPEYES_SYSTEM}, {"role": "user", "content": user_text}],
        "images": images,
        "ability": str(row.get("ability") or "vision"),
        "reward_model": {"style": "rule", "ground_truth": answer.strip()},
        "agent_name": "tool_agent",
        "extra_info": {"question": str(question), "answer": answer.strip()},
    }


def _train_or_test(written: int) -> str:
    return "test.parquet" if written % TEST_EVERY == 0 else "train.parquet"


SPEC = Spec(
    parts={name: Part(DEEPEYES, data_files=(file,)) for name, file in FILES.items()},
    files=("train.parquet", "test.parquet"),
    streams=tuple(
        Stream(name, "train", ("prompt", "images", "reward_model"), deepeyes_row, _train_or_test) for name in FILES
    ),
)
