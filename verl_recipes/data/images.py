"""Image checks shared by the vision datasets: every image must decode and fit Qwen2-VL's image processor."""

import math
from io import BytesIO
from pathlib import Path

from PIL import Image

from verl_recipes.data.common import BadRow

# Qwen2/2.5-VL's processor needs both sides >= 28 px (a 2x2 merge of 14 px patches); qwen_vl_utils.smart_resize
# rejects aspect ratios above 200. verl's rollout resizes with the same code, so such images fail at train time.
MIN_SIDE = 28
MAX_ASPECT = 200
IMAGE = "<image>"


def checked_image(value, note) -> dict:
    """`value` (a {"bytes", "path"} dict, raw bytes or a PIL image) as {"bytes", "path": None}.

    Images with a side under MIN_SIDE are upscaled (bicubic, aspect kept) so both sides are >= MIN_SIDE and
    stored as PNG; other images keep their original bytes."""
    raw = _raw_bytes(value)
    try:
        image = Image.open(BytesIO(raw))
        image.load()
    except Exception as e:
        raise BadRow(f"image does not decode: {type(e).__name__}: {e}") from e
    width, height = image.size
    if max(width, height) / min(width, height) > MAX_ASPECT:
        raise BadRow(f"image is {width}x{height}, aspect ratio above {MAX_ASPECT}")
    if min(width, height) < MIN_SIDE:
        scale = MIN_SIDE / min(width, height)
        size = (max(MIN_SIDE, math.ceil(width * scale)), max(MIN_SIDE, math.ceil(height * scale)))
        buffer = BytesIO()
        image.convert("RGB").resize(size, Image.Resampling.BICUBIC).save(buffer, format="PNG")
        raw = buffer.getvalue()
        note(f"image upscaled to sides >= {MIN_SIDE} px")
    return {"bytes": raw, "path": None}


def _raw_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, Image.Image):
        buffer = BytesIO()
        value.save(buffer, format="PNG")
        return buffer.getvalue()
    if isinstance(value, dict) and value.get("bytes"):
        return value["bytes"]
    if isinstance(value, dict) and value.get("path") and Path(value["path"]).is_file():
        return Path(value["path"]).read_bytes()
    raise BadRow(f"image entry has no bytes nor readable path ({type(value).__name__})")


def checked_images(values, note) -> list[dict]:
    if not isinstance(values, list) or not values:
        raise BadRow("row has no images")
    return [checked_image(v, note) for v in values]


def with_placeholders(text: str, n_images: int, note) -> str:
    """`text` with one <image> placeholder per image, as verl's RLHFDataset requires (it asserts the counts
    match). Text without any placeholder gets them prepended; any other mismatch is a bad row."""
    count = text.count(IMAGE)
    if count == n_images:
        return text
    if count == 0:
        note(f"{IMAGE} placeholder prepended")
        return IMAGE * n_images + "\n" + text
    raise BadRow(f"text has {count} {IMAGE} placeholders but the row has {n_images} images")
