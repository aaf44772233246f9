"""The verl `image_zoom_in_tool` (agents/image_zoom.py)."""

import asyncio
import base64
import io
import math
from types import SimpleNamespace

import pytest
from PIL import Image
from verl.tools.schemas import OpenAIFunctionToolSchema

from verl_recipes.agents.image_zoom import BboxError, ImageZoomInTool, crop_box, load_image, smart_resize

SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "image_zoom_in_tool",
            "description": "Zoom in.",
            "parameters": {
                "type": "object",
                "properties": {"bbox_2d": {"type": "array"}, "label": {"type": "string"}},
                "required": ["bbox_2d"],
            },
        },
    }
)


def _quadrants(width=560, height=420):
    """Red top-left, green top-right, blue bottom-left, white bottom-right."""
    image = Image.new("RGB", (width, height), "white")
    image.paste((255, 0, 0), (0, 0, width // 2, height // 2))
    image.paste((0, 255, 0), (width // 2, 0, width, height // 2))
    image.paste((0, 0, 255), (0, height // 2, width // 2, height))
    return image


def _png_bytes(image):
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _zoom(parameters, agent_data=None, create_kwargs=None, **config):
    tool = ImageZoomInTool({"type": "native", **config}, SCHEMA)

    async def call():
        instance_id, _ = await tool.create(create_kwargs=create_kwargs or {})
        try:
            return await tool.execute(instance_id, parameters, agent_data=agent_data)
        finally:
            await tool.release(instance_id)

    return asyncio.run(call())


@pytest.mark.parametrize(
    "bbox, box",
    [
        ([10, 20, 110, 220], (10, 20, 110, 220)),
        ((10.4, 20.6, 110.2, 220.9), (10, 20, 111, 221)),
        ([-50, -50, 100, 100], (0, 0, 100, 100)),  # clamped to the image
        ([500, 350, 900, 900], (500, 350, 560, 420)),
        ([100, 100, 104, 102], (88, 87, 116, 115)),  # grown to 28x28 around its centre
        ([0, 0, 3, 3], (0, 0, 28, 28)),  # grown, then shifted inside the image
        ([558, 418, 560, 420], (532, 392, 560, 420)),
    ],
)
def test_crop_box_clamps_and_grows(bbox, box):
    assert crop_box(bbox, 560, 420, 28) == box


@pytest.mark.parametrize(
    "bbox, error",
    [
        ([1, 2, 3], "must be a list of 4 numbers"),
        ("[1, 2, 3, 4]", "must be a list of 4 numbers"),
        (None, "must be a list of 4 numbers"),
        ([1, 2, "3", 4], "must hold 4 finite numbers"),
        ([1, 2, True, 4], "must hold 4 finite numbers"),
        ([1, 2, math.nan, 4], "must hold 4 finite numbers"),
        ([1, 2, math.inf, 4], "must hold 4 finite numbers"),
        ([100, 10, 50, 60], "needs x1 < x2 and y1 < y2"),
        ([10, 10, 50, 10], "needs x1 < x2 and y1 < y2"),
        ([600, 10, 700, 60], "lies outside the 560x420 image"),
        ([-100, -100, -1, -1], "lies outside the 560x420 image"),
    ],
)
def test_bad_bboxes_are_explained(bbox, error):
    with pytest.raises(BboxError, match=error):
        crop_box(bbox, 560, 420, 28)


def test_too_thin_boxes_are_rejected():
    with pytest.raises(BboxError, match="too thin"):
        crop_box([0, 0, 10000, 1], 10000, 40, 28)


@pytest.mark.parametrize(
    "height, width, min_pixels, max_pixels",
    [(420, 560, 3136, 802816), (28, 28, 3136, 802816), (3000, 4000, 3136, 802816), (100, 7000, 3136, 802816)],
)
def test_smart_resize_respects_factor_and_budget(height, width, min_pixels, max_pixels):
    h, w = smart_resize(height, width, 28, min_pixels, max_pixels)
    assert h % 28 == 0 and w % 28 == 0
    assert min_pixels <= h * w <= max_pixels
    assert abs(w / h - width / height) / (width / height) < 0.35


def test_zoom_returns_the_region_as_an_image():
    image = _quadrants()
    agent_data = SimpleNamespace(image_data=[image])
    response, reward, metrics = _zoom({"bbox_2d": [0, 0, 280, 210], "label": "red"}, agent_data)
    (crop,) = response.image
    assert response.text == "Zoomed in on the image to the region [0, 0, 280, 210] with label red."
    assert (reward, metrics) == (0.0, {"success": True})
    assert crop.size == (280, 224)  # 280x210 rounded to multiples of 28
    assert crop.getpixel((140, 112)) == (255, 0, 0)


def test_crop_is_scaled_into_the_pixel_budget():
    image = _quadrants(2800, 2100)
    agent_data = SimpleNamespace(image_data=[image])
    response, _, _ = _zoom({"bbox_2d": [0, 0, 2800, 2100]}, agent_data, crop_max_pixels=100_000)
    width, height = response.image[0].size
    assert width * height <= 100_000 and width % 28 == 0 and height % 28 == 0


def test_first_prompt_image_wins_over_create_kwargs():
    agent_data = SimpleNamespace(image_data=[_quadrants(), Image.new("RGB", (56, 56), "black")])
    create_kwargs = {"image": Image.new("RGB", (560, 420), "black")}
    response, _, _ = _zoom({"bbox_2d": [280, 0, 560, 210]}, agent_data, create_kwargs)
    assert response.image[0].getpixel((10, 10)) == (0, 255, 0)


@pytest.mark.parametrize(
    "make_image",
    [
        lambda image: image,
        lambda image: _png_bytes(image),
        lambda image: {"bytes": _png_bytes(image), "path": None},
        lambda image: "data:image/png;base64," + base64.b64encode(_png_bytes(image)).decode(),
    ],
)
def test_create_kwargs_image_is_used_without_prompt_images(make_image):
    create_kwargs = {"image": make_image(_quadrants())}
    response, _, metrics = _zoom({"bbox_2d": [0, 210, 280, 420]}, SimpleNamespace(image_data=None), create_kwargs)
    assert metrics == {"success": True}
    assert response.image[0].getpixel((10, 10)) == (0, 0, 255)


def test_create_kwargs_path_is_resized_into_the_model_frame(tmp_path):
    path = tmp_path / "photo.png"
    _quadrants(570, 430).save(path)  # not a multiple of 28: the model sees it as 560x420
    response, _, _ = _zoom({"bbox_2d": [0, 0, 560, 420]}, None, {"image": f"file://{path}"})
    assert response.text == "Zoomed in on the image to the region [0, 0, 560, 420]."
    assert load_image(str(path)).size == (570, 430)


@pytest.mark.parametrize(
    "parameters, error",
    [
        ({}, "missing argument bbox_2d"),
        ({"box": [0, 0, 10, 10]}, "missing argument bbox_2d"),
        ({"bbox_2d": [0, 0, 10, 10], "label": 5}, "label must be a string"),
        ({"bbox_2d": [900, 900, 950, 950]}, "lies outside the 560x420 image"),
    ],
)
def test_bad_arguments_come_back_as_tool_errors(parameters, error):
    response, reward, metrics = _zoom(parameters, SimpleNamespace(image_data=[_quadrants()]))
    assert response.text.startswith("Error: ") and error in response.text and response.image is None
    assert (reward, metrics) == (0.0, {"success": False})


def test_missing_image_is_a_data_error():
    with pytest.raises(ValueError, match="create_kwargs.image"):
        _zoom({"bbox_2d": [0, 0, 10, 10]}, SimpleNamespace(image_data=[]))


@pytest.mark.parametrize("image", ["https://example.com/a.png", 42])
def test_unsupported_create_kwargs_images_are_rejected(image):
    with pytest.raises(ValueError, match="create_kwargs.image must be"):
        load_image(image)


def test_release_forgets_the_instance_image():
    tool = ImageZoomInTool({"type": "native"}, SCHEMA)

    async def lifecycle():
        instance_id, _ = await tool.create(create_kwargs={"image": _quadrants()})
        before, _, _ = await tool.execute(instance_id, {"bbox_2d": [0, 0, 100, 100]})
        await tool.release(instance_id)
        with pytest.raises(ValueError, match="has no image"):
            await tool.execute(instance_id, {"bbox_2d": [0, 0, 100, 100]})
        return before

    assert asyncio.run(lifecycle()).image is not None


@pytest.mark.parametrize(
    "config, error",
    [
        ({"num_workers": 4}, r"unknown keys \['num_workers'\]"),
        ({"image_factor": 0}, "image_factor must be a positive integer, got 0"),
        ({"min_crop_size": 2.5}, "min_crop_size must be a positive integer"),
        ({"crop_min_pixels": 10**6, "crop_max_pixels": 10**5}, "crop_min_pixels must not exceed crop_max_pixels"),
    ],
)
def test_bad_config_is_rejected(config, error):
    with pytest.raises(ValueError, match=error):
        ImageZoomInTool({"type": "native", **config}, SCHEMA)
