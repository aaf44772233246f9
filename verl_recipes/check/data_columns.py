"""The columns verl 0.9.1 reads from a recipe's parquet files, checked from each file's schema (its footer: no row
is read, so a large file costs nothing):
- `data.prompt_key` (`prompt`): the chat messages, a list of {role, content} (RLHFDataset, utils/dataset/rl_dataset.py);
- `data.reward_fn_key` (`data_source`): a string, which picks the reward (reward_manager/naive.py);
- `reward_model.ground_truth`: a struct column `reward_model` with a `ground_truth` field, what the reward is given;
- `data.image_key` (`images`) for a vision-language model: a list of images.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import DictConfig

GUIDE = "README.md 'Bring your own data and reward' shows the columns"


def _messages(field: pa.DataType) -> bool:
    if not pa.types.is_list(field) and not pa.types.is_large_list(field):
        return False
    item = field.value_type
    return pa.types.is_struct(item) and {"role", "content"} <= {item.field(i).name for i in range(item.num_fields)}


def column_problems(path: str, cfg: DictConfig, vision: bool) -> list[str]:
    """One line per missing or ill-typed column of the parquet file at `path`; [] when verl can read it."""
    try:
        schema = pq.read_schema(path)
    except Exception as err:  # not parquet, truncated: verl's loader would fail the same way
        return [f"cannot read its parquet schema ({type(err).__name__}: {err})"]
    types = {name: schema.field(name).type for name in schema.names}
    problems = []
    prompt, source = str(cfg.data.get("prompt_key", "prompt")), str(cfg.data.get("reward_fn_key", "data_source"))
    if prompt not in types:
        problems.append(f"no column '{prompt}' (data.prompt_key): the chat messages, a list of {{role, content}}")
    elif not _messages(types[prompt]):
        problems.append(f"column '{prompt}' is {types[prompt]}, not a list of {{role, content}} messages")
    if source not in types:
        problems.append(f"no column '{source}' (data.reward_fn_key): a string that names the data's source")
    elif not (pa.types.is_string(types[source]) or pa.types.is_large_string(types[source])):
        problems.append(f"column '{source}' is {types[source]}, not a string")
    reward = types.get("reward_model")
    if reward is None or not pa.types.is_struct(reward) or reward.get_field_index("ground_truth") < 0:
        problems.append("no column 'reward_model.ground_truth': a struct column reward_model with the answer in "
                        f"its field ground_truth{'' if reward is None else f' (reward_model is {reward})'}")
    image = str(cfg.data.get("image_key", "images"))
    if vision and image not in types:
        problems.append(f"no column '{image}' (data.image_key): the images of a vision-language model's prompts")
    elif vision and not (pa.types.is_list(types[image]) or pa.types.is_large_list(types[image])):
        problems.append(f"column '{image}' is {types[image]}, not a list of images")
    return problems
