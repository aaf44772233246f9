"""geo3k: hiyouga/geometry3k with its images, as verl's examples/data_preprocess/geo3k.py lays it out.

The problem text carries one <image> placeholder per image (verl's RLHFDataset swaps each for the image);
the think/boxed instruction follows after a space. train.parquet = train split, test.parquet = test split.
"""

from verl_recipes.data.common import Part, Spec, Stream, text_field
from verl_recipes.data.images import checked_images, with_placeholders
from verl_recipes.data.prompts import THINK_THEN_BOXED

GEO3K = "hiyouga/geometry3k"


def geo3k_row(row: dict, note) -> dict:
    problem = text_field(row, "problem")
    answer = text_field(row, "answer")
    images = checked_images(row["images"], note)
    prompt = f"{with_placeholders(problem, len(images), note)} {THINK_THEN_BOXED}"
    return {
        "data_source": GEO3K,
        "prompt": [{"role": "user", "content": prompt}],
        "images": images,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"question": problem, "answer": answer},
    }


SPEC = Spec(
    parts={"geo3k": Part(GEO3K)},
    files=("train.parquet", "test.parquet"),
    streams=tuple(
        Stream("geo3k", split, ("problem", "answer", "images"), geo3k_row, f"{split}.parquet")
        for split in ("train", "test")
    ),
)
