"""How a Python benchmark (a plugin) puts images into its requests: the one content-part type
of :mod:`evalkit.images` — :class:`Text` and :class:`Image` parts (an image read, checked
and cleaned by :func:`load_image` under :class:`Limits`), a chat turn of them by
:func:`message`, and a whole request by :func:`chat_request`::

    from evalkit.benchmarks.content import Limits, Text, chat_request, load_image

    picture = load_image(path.read_bytes(), Limits(), f"{path}")
    return chat_request(sample.id, sample.subset, [("system", "Be brief."), ("user", [Text(question), picture])])

The request's messages hold each image as a part referencing its SHA-256 (what the prompt
hash and the response cache cover); its bytes ride in ``request.images`` and become base64
``data:`` URLs only when the request is sent (:func:`evalkit.images.sendable`). A benchmark
that sends images says so (:meth:`evalkit.benchmarks.base.Benchmark.sends_images`), so that a
model not known to take images is refused before the run starts.
"""

from __future__ import annotations

from typing import Any, Sequence

from evalkit.images import ContentPart, Image, Limits, Text, load_image, message
from evalkit.types import Request

__all__ = ["ContentPart", "Image", "Limits", "Text", "chat_request", "load_image", "message"]


def chat_request(sample_id: str, subset: str, turns: Sequence[tuple[str, str | Sequence[ContentPart]]], **kwargs: Any) -> Request:
    """The :class:`~evalkit.types.Request` of chat ``turns`` (``(role, text or parts)``, in
    order) with each image's bytes in ``request.images`` (``kwargs`` go to ``Request``:
    ``meta``, ``params``)."""
    images = {p.sha256: p.data for _, parts in turns if not isinstance(parts, str) for p in parts if isinstance(p, Image)}
    return Request(sample_id, subset, messages=[message(role, parts) for role, parts in turns], images=images, **kwargs)
