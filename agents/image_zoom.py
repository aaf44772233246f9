"""verl tool `image_zoom_in_tool` (DeepEyes-style): crops a region of the prompt image and returns it
as a new image in the tool reply.

Which image (verl 0.9.1 ToolAgentLoop calls `create(create_kwargs=...)`, then
`execute(instance_id, args, agent_data=...)`, then `release`, once per tool call):
1. the first prompt image as the model saw it: `agent_data.image_data[0]`, already resized by the
   agent loop (qwen_vl_utils.fetch_image), so bbox pixel coordinates match the model's view;
2. otherwise the DeepEyes data contract `extra_info.tools_kwargs.image_zoom_in_tool.create_kwargs.image`
   (PIL image, {"bytes": ...} / {"path": ...} dict, raw bytes, a file path, file:// or a data: URI),
   resized into the model's frame with smart_resize(image_factor, image_min_pixels, image_max_pixels).
Coordinates are absolute pixels of that image (Qwen2.5-VL convention, not Qwen3-VL's 0..1000 grid).
Tool config keys (agents/image_zoom.yaml): see CONFIG_DEFAULTS.
"""

import base64
import io
import math
from typing import Any
from uuid import uuid4

from PIL import Image
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

MAX_ASPECT_RATIO = 200  # Qwen-VL processors reject images beyond this
CONFIG_DEFAULTS = {
    "type": "native",
    "image_factor": 28,  # patch size x spatial merge: 28 for Qwen2.5-VL, 32 for Qwen3-VL
    "image_min_pixels": 4 * 28 * 28,  # frame of a create_kwargs image (qwen_vl_utils defaults)
    "image_max_pixels": 16384 * 28 * 28,
    "crop_min_pixels": 4 * 28 * 28,  # pixel budget of the returned crop
    "crop_max_pixels": 1024 * 28 * 28,
    "min_crop_size": 28,  # smaller boxes grow around their centre to this many pixels per side
}


class BboxError(ValueError):
    """A bad bbox from the model: reported back to it as the tool reply."""


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) rounded to multiples of `factor` with min_pixels <= h*w <= max_pixels (as qwen_vl_utils)."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def load_image(image: Any) -> Image.Image:
    """Decode the create_kwargs image (trusted dataset content, never fetched over the network)."""
    if isinstance(image, dict):
        image = image.get("bytes") or image.get("path") or image.get("image")
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, bytes):
        return Image.open(io.BytesIO(image)).convert("RGB")
    if isinstance(image, str) and image.startswith("data:image") and "base64," in image:
        return Image.open(io.BytesIO(base64.b64decode(image.split("base64,", 1)[1]))).convert("RGB")
    if isinstance(image, str) and not image.startswith(("http://", "https://")):
        return Image.open(image.removeprefix("file://")).convert("RGB")
    raise ValueError(
        "image_zoom_in_tool: create_kwargs.image must be a PIL image, bytes, a {'bytes'|'path': ...} dict, "
        f"a local path or a data: URI, got {type(image).__name__} {str(image)[:80]!r}"
    )


def _grow(low: float, high: float, min_size: float, limit: int) -> tuple[int, int]:
    """Grow [low, high] around its centre to min_size (at most `limit`), keep it inside [0, limit]."""
    size = min(max(high - low, min_size), limit)
    start = min(max((low + high - size) / 2, 0), limit - size)
    return max(math.floor(start), 0), min(math.ceil(start + size), limit)


def crop_box(bbox: Any, width: int, height: int, min_size: int) -> tuple[int, int, int, int]:
    """Validate the model's bbox_2d against a width x height image; return the integer crop box."""
    shape = f"[x1, y1, x2, y2] in pixels of the {width}x{height} image"
    if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
        raise BboxError(f"bbox_2d must be a list of 4 numbers {shape}, got {str(bbox)[:100]}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in bbox):
        raise BboxError(f"bbox_2d must hold 4 finite numbers {shape}, got {str(bbox)[:100]}")
    x1, y1, x2, y2 = bbox
    if not (x1 < x2 and y1 < y2):
        raise BboxError(f"bbox_2d needs x1 < x2 and y1 < y2, got {list(bbox)}")
    x1, y1, x2, y2 = max(x1, 0), max(y1, 0), min(x2, width), min(y2, height)
    if not (x1 < x2 and y1 < y2):
        raise BboxError(f"bbox_2d {list(bbox)} lies outside the {width}x{height} image")
    left, right = _grow(x1, x2, min_size, width)
    top, bottom = _grow(y1, y2, min_size, height)
    if max(right - left, bottom - top) / min(right - left, bottom - top) > MAX_ASPECT_RATIO:
        raise BboxError(f"bbox_2d {list(bbox)} is too thin: aspect ratio above {MAX_ASPECT_RATIO}")
    return left, top, right, bottom


class ImageZoomInTool(BaseTool):
    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None):
        super().__init__(config, tool_schema)
        unknown = sorted(set(config) - set(CONFIG_DEFAULTS))
        if unknown:
            raise ValueError(f"image_zoom_in_tool config: unknown keys {unknown}; allowed: {sorted(CONFIG_DEFAULTS)}")
        self.cfg = {**CONFIG_DEFAULTS, **config}
        for key, value in self.cfg.items():
            if key != "type" and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise ValueError(f"image_zoom_in_tool config: {key} must be a positive integer, got {value!r}")
        for low, high in (("image_min_pixels", "image_max_pixels"), ("crop_min_pixels", "crop_max_pixels")):
            if self.cfg[low] > self.cfg[high]:
                raise ValueError(f"image_zoom_in_tool config: {low} must not exceed {high}")
        self._create_images: dict[str, Any] = {}

    async def create(self, instance_id: str | None = None, create_kwargs: dict | None = None, **kwargs):
        instance_id = instance_id or str(uuid4())
        self._create_images[instance_id] = (create_kwargs or {}).get("image")
        return instance_id, ToolResponse()

    def _source_image(self, instance_id: str, agent_data: Any) -> Image.Image:
        prompt_images = getattr(agent_data, "image_data", None)
        if prompt_images:
            return prompt_images[0]
        image = self._create_images.get(instance_id)
        if image is None:
            raise ValueError(
                "image_zoom_in_tool has no image: put one in the prompt (the row's images column) or in "
                "extra_info.tools_kwargs.image_zoom_in_tool.create_kwargs.image"
            )
        image = load_image(image)
        c = self.cfg
        height, width = smart_resize(
            image.height, image.width, c["image_factor"], c["image_min_pixels"], c["image_max_pixels"]
        )
        return image.resize((width, height), Image.BICUBIC)

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        image = self._source_image(instance_id, kwargs.get("agent_data"))  # a data problem: raises
        c = self.cfg
        try:
            if not isinstance(parameters, dict) or "bbox_2d" not in parameters:
                raise BboxError("missing argument bbox_2d: [x1, y1, x2, y2] in pixels of the image")
            label = parameters.get("label", "")
            if not isinstance(label, str):
                raise BboxError(f"label must be a string, got {type(label).__name__}")
            box = crop_box(parameters["bbox_2d"], image.width, image.height, c["min_crop_size"])
        except BboxError as e:
            return ToolResponse(text=f"Error: {e}."), 0.0, {"success": False}
        crop = image.crop(box)
        height, width = smart_resize(
            crop.height, crop.width, c["image_factor"], c["crop_min_pixels"], c["crop_max_pixels"]
        )
        text = f"Zoomed in on the image to the region {list(box)}" + (f" with label {label}." if label else ".")
        return ToolResponse(image=[crop.resize((width, height), Image.BICUBIC)], text=text), 0.0, {"success": True}

    async def release(self, instance_id: str, **kwargs) -> None:
        self._create_images.pop(instance_id, None)
