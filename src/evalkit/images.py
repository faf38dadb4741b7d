"""Images in prompts: read, checked under limits, cleaned, hashed, and put into chat messages.

One content-part type for every benchmark (YAML tasks and Python plugins alike):
:class:`Text` and :class:`Image` parts, put into a chat turn by :func:`message` and into a
request by :func:`evalkit.benchmarks.content.chat_request`. No benchmark writes image dicts
by hand.

Shapes
------
* In ``Request.messages`` an image is an OpenAI-style content part whose URL is a reference
  to its bytes by digest, with the facts about it beside::

      {"type": "image_url", "image_url": {"url": "evalkit-image:sha256:<64 hex>"},
       "evalkit_image": {"sha256": "<64 hex>", "media_type": "image/png", "bytes": 1234,
                         "width": 64, "height": 64}}

  The bytes ride in ``Request.images`` (``{sha256: bytes}``), which no hash reads: the prompt
  hash and the response-cache key cover each image's SHA-256 (and size), never a path, so
  the same bytes under another name hit the cache and a changed image misses it.
* :func:`sendable` turns such messages into what OpenAI specifies (and litellm translates for
  Anthropic, Gemini, Bedrock …): ``{"type": "image_url", "image_url": {"url":
  "data:<media type>;base64,<the bytes>"}}``, text parts ``{"type": "text", "text": …}``, in
  the order given. The model clients call it just before a request leaves.
* Journals, ``config.yaml`` and traces never hold the bytes or their base64: rows carry
  :func:`image_facts` (digest, size, media type, width, height); the bytes are stored once per
  run by digest in ``<run dir>/images/<sha256>.<ext>``
  (:func:`evalkit.engine.finalize.store_images`).

Bounds (:class:`Limits`; a YAML task's ``dataset.image_limits``)
------------------------------------------------------------------
An image is refused (:class:`~evalkit.errors.DataError`, one line naming where it came from)
when its bytes are over ``max_bytes`` (a file's size is read from ``stat`` before it is read;
a ``data:`` URI's from its length before it is decoded); when it is not PNG, JPEG, WebP or
GIF (the format is Pillow's reading of the header, restricted to these four plugins: SVG and
everything else is refused); when its header's width × height is over ``max_pixels`` (read by
``Image.open`` and checked before ``.load()``: nothing is decoded past the bound; Pillow's
own decompression-bomb guard, ``Image.MAX_IMAGE_PIXELS``, stays on beneath it); when it does
not decode (truncated or corrupt: ``.load()`` fails; truncated images are never accepted).

Metadata, orientation, colour
-----------------------------
An image whose EXIF orientation is not 1 (a phone's photo taken sideways) is turned as the
tag says before anything else, and re-encoded upright without the tag. A JPEG in CMYK or
YCCK, which providers refuse or show wrongly, is converted to RGB and re-encoded. An image's
EXIF, XMP, comments, text and private chunks never reach the prompt: a PNG's
chunks other than the standard critical ones and colour and transparency ones (``tRNS gAMA
cHRM sRGB sBIT bKGD pHYs iCCP``) are dropped, private ones included, the pixel data left byte
for byte; a JPEG with application segments other than JFIF (APP0) and Adobe (APP14), with a
comment, or with bytes after its end marker is re-encoded (quality 95, no metadata); a WebP
with any chunk but image data, alpha, the extended header and a colour profile (EXIF, XMP, a
private chunk) or bytes after its RIFF size, an animated WebP and every GIF are re-encoded
as PNG of their first frame. A clean PNG, JPEG or WebP is sent byte for byte as read. ``max_side`` (a task's
``prompt.image_max_side``) scales an image whose longer side is over it down to it (Lanczos,
aspect kept) before it is sent.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import io
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence, Union

from evalkit.errors import DataError, printable
from evalkit.untrusted import read_bytes

#: the URL prefix of an image part in ``Request.messages`` (resolved by :func:`sendable`)
REF_PREFIX = "evalkit-image:sha256:"
#: the key of an image part holding its facts (:func:`image_facts`); never sent
FACTS_KEY = "evalkit_image"
#: Pillow's format name → the media type sent
MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}
#: PNG chunks kept: the critical ones of the standard and colour and transparency (no text,
#: time or EXIF; no private chunk, critical-looking or not, whatever its name)
_PNG_KEPT = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"sBIT", b"bKGD", b"pHYs",
                       b"iCCP"})  # fmt: skip
#: WebP (RIFF) chunks a still image sent byte for byte may hold: image data, alpha, the
#: extended header and a colour profile; any other chunk (EXIF, XMP, a private one) makes
#: it re-encoded
_WEBP_KEPT = frozenset({b"VP8 ", b"VP8L", b"VP8X", b"ALPH", b"ICCP"})
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Limits:
    """What one image and one request may cost. ``max_bytes``: bytes of one image (as read,
    and as sent); ``max_pixels``: width × height of one image (its header's, before any
    decoding); ``max_per_sample``: images of one row; ``max_request_bytes``: bytes of all the
    images of one request (its demonstrations' too); ``max_held_bytes``: bytes of images the
    run holds at once, in the driver and in Ray's object store each (:class:`ImageStore`).
    Defaults: 5 MiB (Anthropic's API limit per image), 25 megapixels (under Pillow's own
    89 MP guard), 20 images, 20 MiB (Gemini's limit on an inline request; OpenAI's and
    Anthropic's are larger), 256 MiB."""

    max_bytes: int = 5 * 1024 * 1024
    max_pixels: int = 25_000_000
    max_per_sample: int = 20
    max_request_bytes: int = 20 * 1024 * 1024
    #: the most bytes of images a run holds at once (:class:`ImageStore`, :class:`ImageRefs`)
    max_held_bytes: int = 256 * 1024 * 1024


@dataclass(frozen=True)
class Text:
    """A text part of a chat turn."""

    text: str


@dataclass(frozen=True)
class Image:
    """A checked image as it is sent: ``data`` (the bytes), ``media_type`` (``image/png``,
    ``image/jpeg``, ``image/webp``), ``width`` and ``height`` in pixels. Build one with
    :func:`load_image` (from a path, a ``data:`` URI or bytes, under :class:`Limits`)."""

    data: bytes = field(repr=False)
    media_type: str
    width: int
    height: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def facts(self) -> dict[str, Any]:
        """``{"sha256", "media_type", "bytes", "width", "height"}``: what is recorded of it."""
        return {"sha256": self.sha256, "media_type": self.media_type, "bytes": len(self.data), "width": self.width, "height": self.height}

    def part(self) -> dict[str, Any]:
        """Its content part in ``Request.messages`` (see the module docstring)."""
        facts = self.facts()
        return {"type": "image_url", "image_url": {"url": REF_PREFIX + facts["sha256"]}, FACTS_KEY: facts}


@dataclass(frozen=True)
class ImageFacts:
    """A checked image by its facts alone (its bytes are in an :class:`ImageStore`): what a
    request's message holds of it (:meth:`part`) and what a journal row records."""

    sha256: str
    media_type: str
    bytes: int
    width: int
    height: int

    @classmethod
    def of(cls, image: Image) -> "ImageFacts":
        return cls(image.sha256, image.media_type, len(image.data), image.width, image.height)

    def facts(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "media_type": self.media_type, "bytes": self.bytes, "width": self.width, "height": self.height}

    def part(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": REF_PREFIX + self.sha256}, FACTS_KEY: self.facts()}


#: one part of a chat turn: text or an image (its bytes, or its facts with the bytes in a store)
ContentPart = Union[Text, Image, ImageFacts]


def message(role: str, parts: str | Sequence[ContentPart]) -> dict[str, Any]:
    """A chat message of ``parts`` in order: a plain string stays a string content (as text
    messages always were); parts become a list of ``{"type": "text", "text"}`` and image parts
    (:meth:`Image.part`)."""
    if isinstance(parts, str):
        return {"role": role, "content": parts}
    content = []
    for p in parts:
        if isinstance(p, Text):
            content.append({"type": "text", "text": p.text})
        elif isinstance(p, (Image, ImageFacts)):
            content.append(p.part())
        else:
            raise TypeError(f"a content part is Text, Image or ImageFacts, not {type(p).__name__}")
    return {"role": role, "content": content}


def image_parts(messages: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The facts (:meth:`Image.facts`) of every image part of ``messages``, in order."""
    out = []
    for m in messages or []:
        content = m.get("content") if isinstance(m, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and isinstance(part.get(FACTS_KEY), dict):
                out.append(part[FACTS_KEY])
    return out


def image_facts(messages: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The distinct images of ``messages`` (facts, first appearance first): what a journal
    row records of its request's images."""
    seen, out = set(), []
    for facts in image_parts(messages):
        if facts.get("sha256") not in seen:
            seen.add(facts.get("sha256"))
            out.append(dict(facts))
    return out


def sendable(messages: list[dict[str, Any]], images: dict[str, bytes]) -> list[dict[str, Any]]:
    """``messages`` as sent: each image part as OpenAI's ``image_url`` part with a base64
    ``data:`` URL of its bytes (from ``images``), text parts unchanged; messages without image
    parts are returned as they are.

    Raises:
        ValueError: an image part whose bytes are not in ``images`` (or do not match its digest).
    """
    if not any(isinstance(m.get("content"), list) for m in messages):
        return messages
    out = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            out.append(m)
            continue
        parts = []
        for part in content:
            facts = part.get(FACTS_KEY) if isinstance(part, dict) else None
            if facts is None:
                parts.append(part)
                continue
            digest = str(facts.get("sha256"))
            data = images.get(digest)
            if data is None or hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"image {digest[:12]} of the request has no bytes (or other bytes) in request.images")
            url = f"data:{facts.get('media_type')};base64,{base64.b64encode(data).decode('ascii')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        out.append({**m, "content": parts})
    return out


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined by a newline (an
    image part is ``[image <digest prefix>]``)."""
    if not isinstance(content, list):
        return "" if content is None else str(content)
    out = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            out.append(str(part.get("text", "")))
        elif isinstance(part, dict) and isinstance(part.get(FACTS_KEY), dict):
            out.append(f"[image {str(part[FACTS_KEY].get('sha256'))[:12]}]")
    return "\n".join(out)


# ---- reading -------------------------------------------------------------------------------
def read_source(value: Any, base_dir: Path | None, limits: Limits, where: str) -> bytes:
    """The bytes of one image value of a dataset row: a ``data:`` URI (base64), bytes (a
    Parquet binary cell), ``{"bytes": …, "path": …}`` (a Hugging Face ``Image`` column read
    undecoded: its bytes, else its path), or a path relative to ``base_dir`` (the data file's
    folder). A path must stay inside ``base_dir`` (no absolute path, no ``..`` out of it), and
    neither it nor a folder on the way may be a symbolic link.

    Raises:
        DataError: ``where: <why>`` — a refused path, a missing file, over ``max_bytes``, a
            malformed ``data:`` URI.
    """
    if isinstance(value, dict):
        value = value.get("bytes") if value.get("bytes") is not None else value.get("path")
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if len(data) > limits.max_bytes:
            raise DataError(f"{where}: the image has {len(data)} bytes, over the limit of {limits.max_bytes} (image_limits.max_bytes)")
        return data
    if not isinstance(value, str) or not value:
        raise DataError(f"{where}: an image is a path, a data: URI or bytes, not {type(value).__name__} {str(value)[:40]!r}")
    if value.startswith("data:"):
        return _data_uri(value, limits, where)
    if "://" in value:
        raise DataError(f"{where}: {value[:80]!r}: images are read from files beside the data, never fetched from a URL")
    return _read_path(value, base_dir, limits, where)


def _data_uri(value: str, limits: Limits, where: str) -> bytes:
    head, sep, payload = value.partition(",")
    if not sep or not head.endswith(";base64"):
        raise DataError(f"{where}: a data: URI of an image must be base64 (data:<type>;base64,<data>)")
    if len(payload) * 3 // 4 > limits.max_bytes + 3:
        raise DataError(f"{where}: the data: URI holds about {len(payload) * 3 // 4} bytes, over the limit of {limits.max_bytes} "
                        "(image_limits.max_bytes)")  # fmt: skip
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise DataError(f"{where}: the data: URI is not valid base64") from None
    if len(data) > limits.max_bytes:
        raise DataError(f"{where}: the image has {len(data)} bytes, over the limit of {limits.max_bytes} (image_limits.max_bytes)")
    return data


def _read_path(value: str, base_dir: Path | None, limits: Limits, where: str) -> bytes:
    if base_dir is None:
        raise DataError(f"{where}: {value[:80]!r}: a path to an image needs a local data file to be relative to")
    rel = Path(value)
    if rel.is_absolute() or ".." in rel.parts:
        raise DataError(f"{where}: {value[:80]!r} is outside the data file's folder (an image path is relative to it, without ..)")
    base = Path(os.path.abspath(base_dir))
    try:  # no link anywhere below the data file's folder, a regular file, at most max_bytes
        return read_bytes(base / rel, limits.max_bytes, root=base, follow=False,
                          what="an image (image_limits.max_bytes)")  # fmt: skip
    except DataError as exc:
        raise DataError(f"{where}: image {printable(value, 80)}: {exc}") from None


def undecoded(feature: Any) -> Any:
    """A Hugging Face ``datasets`` feature with every ``Image`` in it read undecoded
    (``Image(decode=False)``: each cell ``{"bytes": …, "path": …}``, which :func:`read_source`
    reads and evalkit checks under its own limits), or ``None`` when it holds no ``Image``.
    Covers a lone ``Image``, a list of them (``List(Image())``, which ``Sequence(Image())``
    is in datasets 4 and later, ``LargeList(Image())``) and an older python list
    ``[Image()]``, nested or not: a row then has several images, in order."""
    import dataclasses

    import datasets  # deferred: only hub tasks need it

    if isinstance(feature, datasets.Image):
        return dataclasses.replace(feature, decode=False)
    if isinstance(feature, list) and len(feature) == 1:
        inner = undecoded(feature[0])
        return None if inner is None else [inner]
    inner_feature = getattr(feature, "feature", None)
    if inner_feature is not None and dataclasses.is_dataclass(feature):
        inner = undecoded(inner_feature)
        return None if inner is None else dataclasses.replace(feature, feature=inner)
    return None


# ---- checking and cleaning -----------------------------------------------------------------
def load_image(data: bytes, limits: Limits, where: str, max_side: int | None = None) -> Image:
    """The :class:`Image` sent for ``data``: checked under ``limits``, cleaned of metadata and
    scaled to ``max_side`` (see the module docstring).

    Raises:
        DataError: ``where: <why>`` — over a limit, not PNG/JPEG/WebP/GIF, undecodable.
    """
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    if len(data) > limits.max_bytes:
        raise DataError(f"{where}: the image has {len(data)} bytes, over the limit of {limits.max_bytes} (image_limits.max_bytes)")
    if data.lstrip()[:5].lower() in (b"<?xml", b"<svg ", b"<svg>") or b"<svg" in data[:512].lower():
        raise DataError(f"{where}: an SVG image is refused (images are PNG, JPEG, WebP or GIF)")
    try:
        img = PILImage.open(io.BytesIO(data), formats=list(MEDIA_TYPES))
    except UnidentifiedImageError:
        raise DataError(f"{where}: not a PNG, JPEG, WebP or GIF image (other formats, SVG included, are refused)") from None
    except PILImage.DecompressionBombError as exc:
        raise DataError(f"{where}: the image is over Pillow's decompression-bomb limit ({exc})"[:300]) from None
    except Exception as exc:  # noqa: BLE001 - any header Pillow cannot read is one line
        raise DataError(f"{where}: the image's header cannot be read ({type(exc).__name__}: {str(exc)[:120]})") from None
    with img:
        width, height = img.size
        if width * height > limits.max_pixels:
            raise DataError(f"{where}: the image is {width}×{height} = {width * height} pixels, over the limit of "
                            f"{limits.max_pixels} (image_limits.max_pixels); nothing was decoded")  # fmt: skip
        if width < 1 or height < 1:
            raise DataError(f"{where}: the image has no pixels ({width}×{height})")
        fmt = img.format or ""
        try:
            img.load()  # the first frame only (GIF, animated WebP, APNG)
        except Exception as exc:  # noqa: BLE001 - truncated, corrupt, bomb: one line
            raise DataError(f"{where}: the {fmt} image does not decode ({type(exc).__name__}: {str(exc)[:120]})") from None
        return _cleaned(img, data, fmt, max_side)


#: the EXIF tag holding an image's orientation (1: upright; 2–8: mirrored and/or rotated)
EXIF_ORIENTATION = 0x0112
#: the pixel modes a JPEG is sent in as it was read (greyscale and RGB, which every provider
#: decodes); any other (CMYK, YCCK) is converted to RGB and re-encoded
_JPEG_SENT_MODES = frozenset({"L", "RGB"})


def orientation(img: Any) -> int:
    """The EXIF orientation of an open image (JPEG APP1, PNG eXIf, WebP EXIF), 1 when it has
    none or an unreadable one."""
    try:
        value = img.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - a malformed EXIF block: as if upright (the block is dropped anyway)
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _cleaned(img: Any, data: bytes, fmt: str, max_side: int | None) -> Image:
    """The bytes to send: ``data`` itself when it is clean, upright, in a colour space every
    provider takes and needs no scaling; else the image re-encoded (PNG chunks dropped
    without re-encoding). An EXIF orientation other than 1 is applied to the pixels first
    (a phone's photo is sent the way it is shown), then the metadata is dropped with the
    rest; a CMYK (or YCCK) JPEG is converted to RGB."""
    from PIL import Image as PILImage
    from PIL import ImageOps

    turn = orientation(img)
    if turn != 1:
        img = ImageOps.exif_transpose(img)  # the pixels turned as the tag says; the tag gone
    width, height = img.size
    scale = max_side is not None and max(width, height) > max_side
    if not scale and turn == 1 and (fmt != "JPEG" or img.mode in _JPEG_SENT_MODES):
        if fmt == "PNG":
            return Image(_png_without_metadata(data), "image/png", width, height)
        if fmt == "JPEG" and _jpeg_clean(img) and data.endswith(b"\xff\xd9"):  # nothing after the end marker
            return Image(data, "image/jpeg", width, height)
        if fmt == "WEBP" and not getattr(img, "is_animated", False) and _webp_clean(data):
            return Image(data, "image/webp", width, height)
    frame = img
    if scale:
        ratio = max_side / max(width, height)  # type: ignore[operator]
        size = (max(1, round(width * ratio)), max(1, round(height * ratio)))
        frame = img.resize(size, PILImage.Resampling.LANCZOS)
    frame = frame.copy()
    frame.info = {k: v for k, v in frame.info.items() if k == "transparency"}  # Pillow writes a comment, ICC or EXIF kept in info
    out = io.BytesIO()
    if fmt == "JPEG":
        rgb = frame.convert("RGB") if frame.mode != "L" else frame
        rgb.info = {}
        rgb.save(out, format="JPEG", quality=95)
        media = "image/jpeg"
    else:
        if frame.mode not in ("1", "L", "LA", "RGB", "RGBA", "P", "I", "I;16"):
            frame = frame.convert("RGBA")
        frame.save(out, format="PNG")  # Pillow writes no text, EXIF or time chunk unless asked
        media = "image/png"
    return Image(out.getvalue(), media, frame.size[0], frame.size[1])


def _png_without_metadata(data: bytes) -> bytes:
    """A PNG's bytes with every ancillary chunk not in :data:`_PNG_KEPT` dropped (text, EXIF,
    time, APNG frames…); the critical chunks (IHDR, PLTE, IDAT, IEND) kept byte for byte."""
    if not data.startswith(_PNG_SIGNATURE):
        return data
    out, at, dropped = [_PNG_SIGNATURE], len(_PNG_SIGNATURE), False
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        end = at + 12 + length
        if kind in _PNG_KEPT:
            out.append(data[at:end])
        else:
            dropped = True
        at = end
        if kind == b"IEND":
            break
    dropped = dropped or at < len(data)  # bytes after IEND are not sent either
    return b"".join(out) if dropped else data


def _webp_clean(data: bytes) -> bool:
    """True when a WebP's RIFF container holds only :data:`_WEBP_KEPT` chunks and nothing after
    them (its RIFF size is the file's)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return False
    if struct.unpack("<I", data[4:8])[0] + 8 != len(data):
        return False
    at = 12
    while at + 8 <= len(data):
        kind, (length,) = data[at : at + 4], struct.unpack("<I", data[at + 4 : at + 8])
        if kind not in _WEBP_KEPT:
            return False
        at += 8 + length + (length & 1)
    return at == len(data)


def _jpeg_clean(img: Any) -> bool:
    """True when a JPEG carries no application segment but JFIF (APP0) and Adobe (APP14), and
    no comment."""
    if img.info.get("comment") or img.info.get("exif") or img.info.get("xmp"):
        return False
    return all(marker in ("APP0", "APP14") for marker, _ in getattr(img, "applist", []))


# ---- holding a run's images: a bounded store, read again when needed -----------------------
class ImageStore:
    """The checked images of a run's data, at most ``max_bytes`` of them held at once.

    Each image is registered once (:meth:`register`) with how to get it again: ``reload``
    reads its file and cleans it as the first time (:func:`load_image`), or ``None`` for an
    image that lives only in the data (a ``data:`` URI, a Parquet or Hugging Face cell),
    whose bytes are kept (``pinned``: the data held them anyway). :meth:`get` gives an
    image's bytes: from the cache, or read again, checked against the digest it was
    registered under and cached, the least recently used re-readable images dropped once the
    cache is over ``max_bytes``. So a run holds about ``max_bytes`` of re-readable images
    whatever the size of its data (plus the images only its data holds).

    Figures: ``total`` (bytes of all registered images), ``pinned`` (those kept),
    ``reloads`` (images read again), ``peak`` (the most bytes held at once)."""

    def __init__(self, max_bytes: int = Limits.max_held_bytes):
        from collections import OrderedDict

        self.max_bytes = max_bytes
        self._reload: dict[str, Callable[[], Image] | None] = {}
        self._pinned: dict[str, bytes] = {}
        self._cache: "OrderedDict[str, bytes]" = OrderedDict()
        self._held = 0
        self.total = self.pinned = self.reloads = self.peak = 0

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an ImageStore stays in the driver; requests leave it as bytes (LazyImages) or references")

    def register(self, image: Image, reload: Callable[[], Image] | None) -> ImageFacts:
        """Record ``image`` (its bytes cached, or pinned without ``reload``); its facts."""
        facts = ImageFacts.of(image)
        if facts.sha256 in self._reload or facts.sha256 in self._pinned:
            return facts
        self.total += facts.bytes
        if reload is None:
            self._pinned[facts.sha256] = image.data
            self.pinned += facts.bytes
            self._reload[facts.sha256] = None
        else:
            self._reload[facts.sha256] = reload
            self._keep(facts.sha256, image.data)
        return facts

    def __contains__(self, digest: object) -> bool:
        return digest in self._reload

    def get(self, digest: str) -> bytes:
        """The bytes of image ``digest``.

        Raises:
            KeyError: not registered.
            DataError: its file no longer reads to those bytes (changed or gone since the run
                read it), one line."""
        data = self._pinned.get(digest)
        if data is not None:
            return data
        data = self._cache.get(digest)
        if data is not None:
            self._cache.move_to_end(digest)
            return data
        reload = self._reload[digest]
        assert reload is not None
        image = reload()
        self.reloads += 1
        if image.sha256 != digest:
            raise DataError(f"image {digest[:12]}: its file changed since the run read it (now {image.sha256[:12]}); "
                            "resume the run to ask again with the new image")  # fmt: skip
        self._keep(digest, image.data)
        return image.data

    def _keep(self, digest: str, data: bytes) -> None:
        self._cache[digest] = data
        self._held += len(data)
        while self._held > self.max_bytes and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._held -= len(dropped)
        self.peak = max(self.peak, self._held + self.pinned)

    def images(self, digests: Sequence[str]) -> "LazyImages":
        """A request's ``images``: ``digests`` whose bytes this store gives when read."""
        return LazyImages(self, tuple(dict.fromkeys(digests)))


class LazyImages(Mapping[str, bytes]):
    """A request's ``images`` (``{sha256: bytes}``) whose bytes come from an
    :class:`ImageStore` when a value is read (when the request is sent, put into Ray's
    object store, written into a batch line or stored in the run directory), so a built
    request holds digests, not bytes. Pickled, it is a plain dict of its bytes."""

    def __init__(self, store: ImageStore, digests: tuple[str, ...]):
        self._store, self._digests = store, digests

    def __getitem__(self, digest: str) -> bytes:
        if digest not in self._digests:
            raise KeyError(digest)
        return self._store.get(digest)

    def __iter__(self) -> Any:
        return iter(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def __reduce__(self) -> Any:
        return dict, (dict(self.items()),)

    def loader(self, digest: str) -> Callable[[], bytes]:
        """A call that gives ``digest``'s bytes when made (not now)."""
        if digest not in self._digests:
            raise KeyError(digest)
        store = self._store
        return lambda: store.get(digest)


def image_loaders(images: Mapping[str, Any]) -> dict[str, Any]:
    """``{digest: bytes or a call giving them}`` of a request's images, nothing read: what a
    run keeps of every image to store it later (:func:`evalkit.engine.finalize.store_images`)."""
    if isinstance(images, LazyImages):
        return {d: images.loader(d) for d in images}
    return dict(images)


# ---- images to model workers by reference --------------------------------------------------
class ImageRefs:
    """A run's images put once each into an object store (Ray's, ``put``: bytes → a reference
    that pickles to a few dozen bytes), so that a model worker's call carries each image of
    its unit by reference, not by its bytes: a worker on another node fetches an image once
    into its node's store, and every later call naming it there reads it locally.

    :meth:`by_reference` gives a unit's ``request.images`` (``{sha256: bytes}``) with each
    value replaced by its reference (the image put on its first use, by digest); the worker
    gets them back with :func:`resolve_images`. ``n_put``: the images put; ``bytes_put``:
    their bytes (each image counted once)."""

    def __init__(self, put: Callable[[bytes], Any], max_bytes: int = Limits.max_held_bytes):
        from collections import OrderedDict

        self._put, self.max_bytes = put, max_bytes
        self.refs: "OrderedDict[str, tuple[Any, int]]" = OrderedDict()
        self._held = 0
        self.n_put = self.bytes_put = 0

    def by_reference(self, images: Mapping[str, bytes]) -> dict[str, Any]:
        """``images`` with each value its reference (its bytes put on first use, each image
        read only then). The run keeps references to at most ``max_bytes`` of images, the
        least recently used dropped past it (Ray frees an image once no call in flight holds
        its reference; one needed again is put again, and counted again)."""
        out = {}
        for digest in images:
            kept = self.refs.get(digest)
            if kept is None:
                data = images[digest]
                kept = self.refs[digest] = (self._put(data), len(data))
                self.n_put += 1
                self.bytes_put += len(data)
                self._held += len(data)
            else:
                self.refs.move_to_end(digest)
            out[digest] = kept[0]
        while self._held > self.max_bytes and len(self.refs) > len(out):
            digest, (_, size) = next(iter(self.refs.items()))
            if digest in out:  # this call's own: kept (they are the most recent anyway)
                break
            del self.refs[digest]
            self._held -= size
        return out


async def resolve_images(images: dict[str, Any], get: Callable[[list[Any]], Awaitable[list[bytes]]] | None = None) -> dict[str, bytes]:
    """``images`` whose values are references (:meth:`ImageRefs.by_reference`) with their
    bytes again, read by ``get`` (references → bytes, in order; by default each reference
    awaited, as Ray's are in a model worker, an async actor); a value that is bytes already
    stays (a unit solved in process).

    Raises:
        ValueError: a reference read to something that is not the bytes of its digest.
    """
    pending = [d for d, v in images.items() if not isinstance(v, (bytes, bytearray))]
    if not pending:
        return images
    refs = [images[d] for d in pending]
    got = await get(refs) if get is not None else await asyncio.gather(*refs)
    out = dict(images)
    for digest, data in zip(pending, got):
        if not isinstance(data, (bytes, bytearray)) or hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"image {digest[:12]}: its reference did not read back to its bytes")
        out[digest] = bytes(data)
    return out


# ---- a run's stored images -----------------------------------------------------------------
def stored_image(run_dir: Path, digest: str, max_bytes: int = Limits.max_bytes) -> bytes | None:
    """The bytes of image ``digest`` stored in ``run_dir`` (``images/<sha256>.<ext>``), ``None``
    when absent, a link, over ``max_bytes`` or not those bytes."""
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        return None
    for ext in EXTENSIONS.values():
        path = Path(run_dir) / "images" / f"{digest}.{ext}"
        if not os.path.lexists(path):
            continue
        try:
            data = read_bytes(path, max_bytes, root=run_dir, follow=False, what="a stored image")
        except DataError:
            return None
        return data if hashlib.sha256(data).hexdigest() == digest else None
    return None


def thumbnail(data: bytes, max_side: int = 512) -> tuple[str, bytes]:
    """``(media type, bytes)`` of an image scaled so its longer side is at most ``max_side``
    (PNG; the image itself when it is small enough already)."""
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(data), formats=list(MEDIA_TYPES)) as img:
        if max(img.size) <= max_side:
            return media_type_of(data), data
        img.thumbnail((max_side, max_side))
        out = io.BytesIO()
        (img if img.mode in ("RGB", "RGBA", "L", "LA", "P") else img.convert("RGBA")).save(out, format="PNG")
        return "image/png", out.getvalue()


def media_type_of(data: bytes) -> str:
    if data.startswith(_PNG_SIGNATURE):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return "application/octet-stream"
