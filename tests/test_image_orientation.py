"""Images as they are shown (issue 49): an EXIF orientation is applied to the pixels, then the
metadata is dropped (a phone's photo taken sideways arrives upright); a CMYK JPEG, which
providers refuse, is converted to RGB; an upright, clean image is still sent byte for byte."""

from __future__ import annotations

import io

import pytest
from PIL import Image as PILImage

from evalkit.images import EXIF_ORIENTATION, Limits, load_image, orientation

#: the pixels of an upright photo: 6 × 4, every pixel its own colour (a lossless format keeps
#: them exactly, so where each one lands says how the image was turned)
UPRIGHT = [[(40 * x, 60 * y, 10 + 20 * x + 5 * y) for x in range(6)] for y in range(4)]

#: how a camera stores an upright scene under each EXIF orientation: the transform that the
#: tag's reader undoes (TIFF 6.0 / EXIF 2.3, tag 0x0112)
STORED_AS = {
    1: None,
    2: PILImage.Transpose.FLIP_LEFT_RIGHT,
    3: PILImage.Transpose.ROTATE_180,
    4: PILImage.Transpose.FLIP_TOP_BOTTOM,
    5: PILImage.Transpose.TRANSPOSE,
    6: PILImage.Transpose.ROTATE_90,  # the phone held upright, its sensor read sideways: shown turned 90° clockwise
    7: PILImage.Transpose.TRANSVERSE,
    8: PILImage.Transpose.ROTATE_270,
}


def _upright() -> PILImage.Image:
    img = PILImage.new("RGB", (6, 4))
    img.putdata([p for row in UPRIGHT for p in row])
    return img


def _stored(tag: int, fmt: str) -> bytes:
    """The upright scene stored as a camera with orientation ``tag`` stores it, in ``fmt``,
    the tag in its EXIF block (and a camera's maker fields beside it)."""
    img = _upright()
    if STORED_AS[tag] is not None:
        img = img.transpose(STORED_AS[tag])
    exif = PILImage.Exif()
    exif[EXIF_ORIENTATION] = tag
    exif[0x010F] = "PhoneMaker"  # Make
    exif[0x0110] = "Phone 15"  # Model
    out = io.BytesIO()
    img.save(out, format=fmt, exif=exif.tobytes(), **({"lossless": True} if fmt == "WEBP" else {}))
    return out.getvalue()


def _pixels(data: bytes) -> list[list[tuple[int, int, int]]]:
    with PILImage.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB")
        return [[rgb.getpixel((x, y)) for x in range(rgb.size[0])] for y in range(rgb.size[1])]


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
@pytest.mark.parametrize("tag", range(1, 9))
def test_every_orientation_arrives_upright_without_its_metadata(fmt: str, tag: int) -> None:
    data = _stored(tag, fmt)
    with PILImage.open(io.BytesIO(data)) as raw:
        assert orientation(raw) == tag  # what the camera wrote
    sent = load_image(data, Limits(), "photo")
    assert (sent.width, sent.height) == (6, 4)
    assert _pixels(sent.data) == UPRIGHT  # exactly the scene (a lossless format)
    with PILImage.open(io.BytesIO(sent.data)) as img:
        assert orientation(img) == 1 and not img.getexif()  # no EXIF left: no tag, no maker, no model
    assert b"PhoneMaker" not in sent.data and b"Exif" not in sent.data


def test_a_sideways_phone_jpeg_is_turned_then_re_encoded_without_exif() -> None:
    """A JPEG taken with the phone upright (tag 6): 40 × 20 as stored, 20 × 40 as shown; the
    red top-left of the scene is at the top-left of what is sent."""
    scene = PILImage.new("RGB", (20, 40), (0, 0, 255))
    scene.paste((255, 0, 0), (0, 0, 10, 10))  # the scene's top-left corner
    stored = scene.transpose(STORED_AS[6])
    exif = PILImage.Exif()
    exif[EXIF_ORIENTATION] = 6
    exif[0x8825] = {1: "N"}  # a GPS block: where the photo was taken
    out = io.BytesIO()
    stored.save(out, format="JPEG", quality=95, exif=exif.tobytes())
    sent = load_image(out.getvalue(), Limits(), "photo.jpg")
    assert sent.media_type == "image/jpeg" and (sent.width, sent.height) == (20, 40)
    with PILImage.open(io.BytesIO(sent.data)) as img:
        assert img.size == (20, 40) and not img.getexif() and "exif" not in img.info
        r, g, b = img.convert("RGB").getpixel((2, 2))
        assert r > 200 and b < 60  # red where the scene has it
        r, g, b = img.convert("RGB").getpixel((17, 2))
        assert b > 200 and r < 60


def test_orientation_with_max_side_scales_the_upright_image() -> None:
    data = _stored(6, "PNG")
    sent = load_image(data, Limits(), "photo", max_side=3)
    assert (sent.width, sent.height) == (3, 2)  # the upright 6 × 4, scaled: not 2 × 3


def test_an_upright_clean_jpeg_is_still_sent_byte_for_byte() -> None:
    out = io.BytesIO()
    _upright().save(out, format="JPEG", quality=90)
    assert load_image(out.getvalue(), Limits(), "plain.jpg").data == out.getvalue()


def test_a_cmyk_jpeg_is_converted_to_rgb() -> None:
    out = io.BytesIO()
    PILImage.new("CMYK", (16, 8), (0, 255, 255, 0)).save(out, format="JPEG", quality=95)  # red, in print inks
    with PILImage.open(io.BytesIO(out.getvalue())) as raw:
        assert raw.mode == "CMYK"
    sent = load_image(out.getvalue(), Limits(), "print.jpg")
    assert sent.media_type == "image/jpeg" and sent.data != out.getvalue()
    with PILImage.open(io.BytesIO(sent.data)) as img:
        assert img.mode == "RGB" and img.size == (16, 8)
        r, g, b = img.getpixel((8, 4))
        assert r > 200 and g < 60 and b < 60


def test_a_greyscale_jpeg_stays_as_it_is() -> None:
    out = io.BytesIO()
    PILImage.new("L", (8, 8), 128).save(out, format="JPEG")
    assert load_image(out.getvalue(), Limits(), "grey.jpg").data == out.getvalue()
