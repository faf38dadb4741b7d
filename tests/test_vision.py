"""Images in tasks (issue 33): content parts as OpenAI specifies them at the server, litellm's
translation for Anthropic and Gemini (built offline), hashes and cache keys by bytes, every
bound with a hostile image, the per-provider image token formulas against the providers'
documented examples, the text-only-model refusal, and traces' attachments. In-process tests;
the whole-command ones are marked slow."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import yaml
from PIL import Image as PILImage

from evalkit.benchmarks.content import chat_request
from evalkit.images import FACTS_KEY, Limits, Text, load_image, message, sendable
from evalkit.benchmarks.task.benchmark import TaskBenchmark
from evalkit.benchmarks.task.settings import TaskSettings
from evalkit.errors import ConfigError, DataError
from evalkit.providers import (
    anthropic_image_tokens,
    estimate_prompt_tokens,
    gemini_image_tokens,
    image_tokens,
    openai_image_tokens,
)
from tests.conftest import REPO_ROOT


# ---- helpers ---------------------------------------------------------------------------------
def png_bytes(size=(32, 24), colour=(200, 10, 10), fmt="PNG", **save) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", size, colour).save(out, format=fmt, **save)
    return out.getvalue()


def noise_jpeg(size=(64, 64)) -> bytes:
    """A JPEG of noise-like pixels (large enough to cut inside its scan data)."""
    pixels = bytes((i * 7919) % 251 for i in range(size[0] * size[1] * 3))
    out = io.BytesIO()
    PILImage.frombytes("RGB", size, pixels).save(out, format="JPEG", quality=95)
    return out.getvalue()


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def huge_png(width=20_000, height=20_000) -> bytes:
    """A PNG whose header says width × height (1-bit grey) with a few KB of data: a bomb."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 4000)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def task(tmp_path: Path, rows: list[dict], **over) -> TaskBenchmark:
    data = tmp_path / "data" / "rows.jsonl"
    data.parent.mkdir(exist_ok=True)
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = {"name": "vis", "kind": "task", "dataset": {"path": str(data), "fields": {"id": "id", "input": "q", "target": "a",
            "images": "img"}}, "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match"}]}  # fmt: skip
    for key, value in over.items():
        spec[key] = {**spec.get(key, {}), **value}
    return TaskBenchmark(TaskSettings(**spec))


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / "data" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def one_line_refusal(bench: TaskBenchmark) -> str:
    with pytest.raises(DataError) as info:
        bench.check()
    message = str(info.value)
    assert "\n" not in message
    return message


# ---- item 1: parts in the user turn, order kept, demonstrations carry theirs -------------------
def test_images_follow_the_rendered_text_in_the_user_turn_in_order(tmp_path: Path):
    a, b = png_bytes(colour=(1, 2, 3)), png_bytes(colour=(4, 5, 6))
    write(tmp_path, "a.png", a), write(tmp_path, "sub/b.png", b)
    bench = task(tmp_path, [{"id": "x", "q": "Count?", "a": "2", "img": ["sub/b.png", "a.png"]}])
    bench.check()
    request = bench.build(bench.load()[0], 0)
    parts = request.messages[-1]["content"]
    assert parts[0] == {"type": "text", "text": "Count?"}
    import hashlib

    assert [p[FACTS_KEY]["sha256"] for p in parts[1:]] == [hashlib.sha256(b).hexdigest() for b in (b, a)]
    assert [p["image_url"]["url"] for p in parts[1:]] == [f"evalkit-image:sha256:{hashlib.sha256(x).hexdigest()}" for x in (b, a)]
    assert request.images == {hashlib.sha256(b).hexdigest(): b, hashlib.sha256(a).hexdigest(): a}


def test_demonstrations_carry_their_images(tmp_path: Path):
    rows = [{"id": f"r{i}", "q": f"q{i}", "a": str(i), "img": f"{i}.png"} for i in range(3)]
    for i in range(3):
        write(tmp_path, f"{i}.png", png_bytes(colour=(i, i, i)))
    bench = task(tmp_path, rows)
    samples = bench.load()
    request = bench.build(samples[0], 2)
    users = [m for m in request.messages if m["role"] == "user"]
    assert len(users) == 3 and all(isinstance(m["content"], list) and len(m["content"]) == 2 for m in users)
    assert len(request.images) == 3  # each demonstration's image and the sample's


def test_a_plugin_builds_the_same_parts_through_the_content_type():
    img = load_image(png_bytes(), Limits(), "t")
    request = chat_request("s", "all", [("system", "Be brief."), ("user", [Text("What colour?"), img])])
    assert request.messages[1] == message("user", [Text("What colour?"), img])
    assert request.images == {img.sha256: img.data}
    with pytest.raises(TypeError):
        message("user", [{"type": "text", "text": "a dict by hand"}])  # type: ignore[list-item]


# ---- item 6: what the server receives; litellm's translations --------------------------------
@pytest.mark.slow  # litellm's or MLflow's first import, a server thread
def test_the_server_sees_openai_content_parts_with_byte_identical_base64_in_order(tmp_path: Path, fake_openai):
    from evalkit.models.litellm_client import LiteLLMModel

    first, second = png_bytes(colour=(9, 9, 9)), png_bytes(size=(40, 10), colour=(0, 200, 0))
    write(tmp_path, "one.png", first), write(tmp_path, "two.png", second)
    bench = task(tmp_path, [{"id": "x", "q": "Which is green? vision-order-test", "a": "2", "img": ["one.png", "two.png"]}])
    request = bench.build(bench.load()[0], 0)
    fake_openai.set_plan({"default": {"content": "2"}})
    model = LiteLLMModel(provider_model="openai/vision-test", api_base=fake_openai.api_base, api_key="sk-test", max_retries=0, timeout_s=120)
    completion = asyncio.run(model.generate(request))
    assert completion.text == "2"
    sent = fake_openai.log[-1]["messages"][-1]
    assert sent == {"role": "user", "content": [
        {"type": "text", "text": "Which is green? vision-order-test"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(first).decode()}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(second).decode()}},
    ]}  # fmt: skip


@pytest.mark.parametrize("model", ["anthropic/claude-3-5-sonnet-20241022", "gemini/gemini-1.5-pro"])
def test_litellm_translates_the_same_parts_for_anthropic_and_gemini(monkeypatch, model: str):
    from litellm.types.utils import CallTypes
    from litellm.utils import return_raw_request

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("GEMINI_API_KEY", "sk-test")
    a, b = load_image(png_bytes(colour=(1, 1, 1)), Limits(), "a"), load_image(png_bytes(fmt="JPEG"), Limits(), "b")
    request = chat_request("s", "all", [("user", [Text("Compare them."), a, b])])
    raw = return_raw_request(endpoint=CallTypes.completion, kwargs={"model": model, "messages": sendable(request.messages, request.images)})
    body = raw["raw_request_body"]
    b64 = [base64.b64encode(x.data).decode() for x in (a, b)]
    if model.startswith("anthropic/"):
        content = body["messages"][0]["content"]
        assert content[0] == {"type": "text", "text": "Compare them."}
        assert [(c["source"]["media_type"], c["source"]["data"]) for c in content[1:]] == [("image/png", b64[0]), ("image/jpeg", b64[1])]
    else:
        parts = body["contents"][0]["parts"]
        assert parts[0] == {"text": "Compare them."}
        assert [(p["inline_data"]["mime_type"], p["inline_data"]["data"]) for p in parts[1:]] == [("image/png", b64[0]), ("image/jpeg", b64[1])]


# ---- item 2: hashes by bytes ------------------------------------------------------------------
def test_hashes_cover_image_bytes_not_names_and_the_fingerprint_covers_the_files(tmp_path: Path):
    from evalkit.engine.plan import data_fingerprint

    picture = png_bytes(colour=(7, 7, 7))
    write(tmp_path, "a.png", picture), write(tmp_path, "renamed.png", picture)
    first = task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "a.png"}])
    req_a = first.build(first.load()[0], 0)
    other = task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "renamed.png"}])
    samples = other.load()
    req_b = other.build(samples[0], 0)
    assert req_a.prompt_hash() == req_b.prompt_hash() and req_a.request_hash("m") == req_b.request_hash("m")  # a cache hit
    fp_before, files_before = data_fingerprint(samples), dict(other.data_fingerprints())
    write(tmp_path, "renamed.png", png_bytes(colour=(7, 7, 8)))  # one pixel value changed
    changed = task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "renamed.png"}])
    samples = changed.load()
    req_c = changed.build(samples[0], 0)
    assert req_c.prompt_hash() != req_b.prompt_hash() and req_c.request_hash("m") != req_b.request_hash("m")  # a miss
    assert data_fingerprint(samples) != fp_before
    key = [k for k in files_before if k.endswith("#images")][0]
    assert changed.data_fingerprints()[key] != files_before[key]


def test_journal_rows_record_digests_and_sizes_never_base64(tmp_path: Path):
    from evalkit.engine.records import failure_record, prediction_record
    from evalkit.engine.work import WorkItem
    from evalkit.types import Failure, SampleScore, Trajectory

    picture = png_bytes()
    write(tmp_path, "a.png", picture)
    bench = task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "a.png"}])
    sample = bench.load()[0]
    unit = WorkItem(sample, bench.build(sample, 0), False)
    row = prediction_record(unit, "m", Trajectory(final_output="1"), SampleScore(scores={"exact_match": 1.0}), {}, {})
    failed = failure_record(unit, "m", Trajectory(failure=Failure("timeout", "slow")), {})
    for r in (row, failed):
        assert r["images"] == [{"sha256": load_image(picture, Limits(), "t").sha256, "media_type": "image/png",
                                "bytes": len(picture), "width": 32, "height": 24}]  # fmt: skip
        assert base64.b64encode(picture).decode()[:40] not in json.dumps(r)


# ---- item 3: bounds, hostile images ----------------------------------------------------------
def test_a_20000_square_png_of_a_few_kb_is_refused_from_its_header_without_decoding(tmp_path: Path, monkeypatch):
    from PIL import ImageFile

    bomb = huge_png()
    assert len(bomb) < 4096
    write(tmp_path, "bomb.png", bomb)
    loads = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: loads.append(self) or None)
    message = one_line_refusal(task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "bomb.png"}]))
    assert "row 1" in message and "'x'" in message and "'img'" in message
    assert "pixels, over the limit" in message or "decompression-bomb" in message
    assert loads == []  # nothing decoded


def test_evalkits_own_pixel_cap_applies_before_pillows_guard(tmp_path: Path, monkeypatch):
    from PIL import ImageFile

    write(tmp_path, "big.png", huge_png(9000, 9000))  # 81 MP: under Pillow's 89 MP guard, over the default 25 MP
    loads = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: loads.append(self) or None)
    message = one_line_refusal(task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "big.png"}]))
    assert "9000×9000 = 81000000 pixels, over the limit of 25000000" in message and "row 1" in message
    assert loads == []
    from PIL import Image as PIL

    assert PIL.MAX_IMAGE_PIXELS is not None  # Pillow's bomb guard left on


@pytest.mark.parametrize("name, data, expected", [
    ("cut.jpg", (lambda j: j[: len(j) * 2 // 3])(noise_jpeg()), "does not decode"),
    ("pic.svg", b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>', "SVG"),
    ("pic.png", b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>', "SVG"),
    ("pic.bmp", (lambda: (lambda o: (PILImage.new("RGB", (4, 4)).save(o, format="BMP"), o.getvalue())[1])(io.BytesIO()))(),
     "not a PNG, JPEG, WebP or GIF"),
    ("junk.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "not a PNG, JPEG, WebP or GIF"),
])  # fmt: skip
def test_corrupt_truncated_svg_and_other_formats_are_one_line(tmp_path: Path, name: str, data: bytes, expected: str):
    write(tmp_path, name, data)
    message = one_line_refusal(task(tmp_path, [{"id": "row-id", "q": "Q", "a": "1", "img": name}]))
    assert expected in message and "row 1" in message and "row-id" in message


def test_a_path_outside_the_data_folder_and_a_link_are_refused(tmp_path: Path):
    write(tmp_path, "ok.png", png_bytes())
    (tmp_path / "outside.png").write_bytes(png_bytes())
    assert "outside the data file's folder" in one_line_refusal(task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "../outside.png"}]))
    assert "outside the data file's folder" in one_line_refusal(task(tmp_path, [{"id": "x", "q": "Q", "a": "1",
                                                                                  "img": str(tmp_path / "outside.png")}]))  # fmt: skip
    (tmp_path / "data" / "link.png").symlink_to(tmp_path / "data" / "ok.png")
    assert "symbolic link" in one_line_refusal(task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "link.png"}]))
    (tmp_path / "data" / "dirlink").symlink_to(tmp_path / "data")
    assert "symbolic link" in one_line_refusal(task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "dirlink/ok.png"}]))
    assert "never fetched" in one_line_refusal(task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": "http://example.com/a.png"}]))


def test_each_size_limit_is_one_line(tmp_path: Path):
    write(tmp_path, "a.png", png_bytes(size=(64, 64)))
    write(tmp_path, "b.png", png_bytes(size=(64, 64), colour=(1, 1, 1)))
    size = (tmp_path / "data" / "a.png").stat().st_size
    row = [{"id": "x", "q": "Q", "a": "1", "img": ["a.png", "b.png"]}]
    assert "image_limits.max_bytes" in one_line_refusal(task(tmp_path, row, dataset={"image_limits": {"max_bytes": size - 1}}))
    assert "image_limits.max_pixels" in one_line_refusal(task(tmp_path, row, dataset={"image_limits": {"max_pixels": 64 * 64 - 1}}))
    assert "image_limits.max_per_sample" in one_line_refusal(task(tmp_path, row, dataset={"image_limits": {"max_per_sample": 1}}))
    message = one_line_refusal(task(tmp_path, row, dataset={"image_limits": {"max_request_bytes": size + 1}}))
    assert "max_request_bytes" in message
    uri = "data:image/png;base64," + base64.b64encode(png_bytes(size=(64, 64))).decode()
    assert "image_limits.max_bytes" in one_line_refusal(task(tmp_path, [{"id": "x", "q": "Q", "a": "1", "img": uri}],
                                                             dataset={"image_limits": {"max_bytes": 50}}))  # fmt: skip


def test_metadata_never_reaches_the_prompt():
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Author", "secret-author-name")
    out = io.BytesIO()
    PILImage.new("RGB", (8, 8), (5, 5, 5)).save(out, format="PNG", pnginfo=info)
    with_text = out.getvalue()
    assert b"secret-author-name" in with_text
    cleaned = load_image(with_text, Limits(), "t")
    assert b"secret-author-name" not in cleaned.data and b"tEXt" not in cleaned.data
    assert cleaned.data == png_bytes(size=(8, 8), colour=(5, 5, 5))  # the same pixels' chunks, byte for byte
    exif = PILImage.Exif()
    exif[0x010E] = "secret-exif-description"  # ImageDescription
    out = io.BytesIO()
    PILImage.new("RGB", (16, 16), (9, 9, 9)).save(out, format="JPEG", exif=exif.tobytes(), comment=b"secret-comment")
    jpeg = load_image(out.getvalue(), Limits(), "t")
    assert b"secret-exif-description" not in jpeg.data and b"secret-comment" not in jpeg.data and jpeg.media_type == "image/jpeg"
    clean = png_bytes(fmt="JPEG")
    assert load_image(clean, Limits(), "t").data == clean  # a clean JPEG is sent as read
    out = io.BytesIO()
    PILImage.new("RGB", (16, 16), (9, 9, 9)).save(out, format="WEBP", exif=exif.tobytes())
    webp = load_image(out.getvalue(), Limits(), "t")
    assert b"secret-exif-description" in out.getvalue() and b"secret-exif-description" not in webp.data
    clean = png_bytes(fmt="WEBP")
    assert load_image(clean, Limits(), "t").data == clean


def test_gif_first_frame_only_and_max_side_resize():
    frames = [PILImage.new("P", (20, 10), i) for i in (1, 2)]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:])
    gif = load_image(out.getvalue(), Limits(), "t")
    assert gif.media_type == "image/png" and (gif.width, gif.height) == (20, 10)
    with PILImage.open(io.BytesIO(gif.data)) as img:
        assert getattr(img, "n_frames", 1) == 1
    big = load_image(png_bytes(size=(400, 100)), Limits(), "t", max_side=200)
    assert (big.width, big.height) == (200, 50)
    with PILImage.open(io.BytesIO(big.data)) as img:
        assert img.size == (200, 50)


def test_parquet_bytes_and_data_uris_are_images(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    a, b = png_bytes(colour=(3, 3, 3)), png_bytes(colour=(4, 4, 4))
    path = tmp_path / "data" / "rows.parquet"
    path.parent.mkdir()
    table = pa.table({"id": ["p", "q"], "q": ["Q1", "Q2"], "a": ["1", "2"],
                      "img": [{"bytes": a, "path": None}, {"bytes": b, "path": "ignored.png"}]})  # fmt: skip
    pq.write_table(table, path)
    spec = {"name": "vis", "kind": "task", "dataset": {"path": str(path), "fields": {"id": "id", "input": "q", "target": "a",
            "images": "img"}}, "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match"}]}  # fmt: skip
    bench = TaskBenchmark(TaskSettings(**spec))
    bench.check()
    requests = [bench.build(s, 0) for s in bench.load()]
    assert [list(r.images.values()) for r in requests] == [[a], [b]]
    uri = task(tmp_path, [{"id": "u", "q": "Q", "a": "1", "img": "data:image/png;base64," + base64.b64encode(a).decode()}])
    assert list(uri.build(uri.load()[0], 0).images.values()) == [a]


# ---- item 4: models and cost -----------------------------------------------------------------
def test_openai_tiles_against_the_documented_examples():
    assert openai_image_tokens(1024, 1024, "high") == 765
    assert openai_image_tokens(2048, 4096, "high") == 1105
    assert openai_image_tokens(4096, 8192, "low") == 85
    assert openai_image_tokens(1024, 1024, "high", mini=True) == 2833 + 4 * 5667  # gpt-4o-mini's larger multiplier
    assert image_tokens("openai/gpt-4o-mini-2024-07-18", 1024, 1024) == 25501


def test_anthropic_area_after_resize_against_the_documented_examples():
    assert anthropic_image_tokens(200, 200) == 54
    assert anthropic_image_tokens(1000, 1000) == 1334
    assert anthropic_image_tokens(1092, 1092) == 1590
    assert anthropic_image_tokens(4000, 4000) == anthropic_image_tokens(1095, 1095) <= 1600  # scaled before counting
    assert image_tokens("anthropic/claude-3-5-sonnet-20241022", 200, 200) == 54


def test_gemini_tiles_against_the_documented_examples():
    assert gemini_image_tokens(384, 384) == 258
    assert gemini_image_tokens(960, 540) == 6 * 258
    assert image_tokens("gemini/gemini-1.5-pro", 960, 540) == 1548


def test_the_estimate_counts_images_by_the_providers_formula_not_litellms():
    img = load_image(png_bytes(size=(1024, 1024)), Limits(), "t")
    request = chat_request("s", "all", [("user", [Text("hi"), img])])
    text_only = estimate_prompt_tokens("openai/gpt-4o", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], None)
    assert estimate_prompt_tokens("openai/gpt-4o", request.messages, None) == text_only + 765
    claude = estimate_prompt_tokens("anthropic/claude-3-5-sonnet-20241022", request.messages, None)
    claude_text = estimate_prompt_tokens("anthropic/claude-3-5-sonnet-20241022", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], None)
    assert claude - claude_text == anthropic_image_tokens(1024, 1024) == 1399


def _resolve(tmp_path: Path, monkeypatch, *extra: str):
    from evalkit.compose import compose, resolve

    (tmp_path / "conf" / "benchmark").mkdir(parents=True)
    write(tmp_path, "a.png", png_bytes())
    (tmp_path / "data" / "rows.jsonl").write_text(json.dumps({"id": "x", "q": "Q", "a": "1", "img": "a.png"}) + "\n")
    spec = {"name": "visq", "kind": "task", "dataset": {"path": str(tmp_path / "data" / "rows.jsonl"),
            "fields": {"input": "q", "target": "a", "images": "img"}}, "prompt": {"template": "{{ input }}"},
            "scorers": [{"kind": "exact_match"}]}  # fmt: skip
    (tmp_path / "conf" / "benchmark" / "visq.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path / "conf"))
    return resolve(compose(["benchmark=visq", f"run.output_root={tmp_path / 'out'}", *extra]))


def test_images_to_a_model_not_known_to_take_them_are_refused_in_one_line_naming_the_key(tmp_path: Path, monkeypatch):
    args = ["model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1"]
    with pytest.raises(ConfigError) as info:
        _resolve(tmp_path, monkeypatch, *args)
    assert "model.vision" in str(info.value) and "set model.vision=true" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()
    _, cfg = _resolve(tmp_path / "b", monkeypatch, *args, "model.vision=true")
    assert cfg.model.vision is True


def test_a_declared_text_only_model_and_the_embedded_server_are_refused(tmp_path: Path, monkeypatch):
    with pytest.raises(ConfigError, match="model.vision=false"):
        _resolve(tmp_path, monkeypatch, "model=gpt4o", "model.vision=false", "run.dry_run=true")
    with pytest.raises(ConfigError, match="text-only"):
        _resolve(tmp_path / "b", monkeypatch, "model=smollm2")
    _resolve(tmp_path / "c", monkeypatch, "model=reference")  # offline models send nothing


def test_litellm_supports_vision_counts_only_when_it_says_true():
    from evalkit.providers import takes_images

    assert takes_images("openai/gpt-4o", None)[0] is True
    assert takes_images("openai/my-custom-vlm", None)[0] is False
    assert takes_images("openai/my-custom-vlm", True) == (True, "model.vision=true")
    assert takes_images("openai/gpt-4o", False)[0] is False


# ---- item 5: traces --------------------------------------------------------------------------
@pytest.mark.slow  # litellm's or MLflow's first import, a server thread
def test_a_trace_references_its_images_as_attachments_and_carries_their_bytes(tmp_path: Path):
    from mlflow.tracing.attachments import Attachment

    from evalkit.engine.finalize import store_images
    from evalkit.tracking.samples import Outcome
    from evalkit.tracking.traces import TRACE_IMAGE_SIDE, build_trace

    small, large = load_image(png_bytes(), Limits(), "s"), load_image(png_bytes(size=(1200, 600)), Limits(), "l")
    request = chat_request("s1", "all", [("user", [Text("Q"), small, large])])
    store_images(tmp_path, request.images)
    row = {"sample_id": "s1", "subset": "all", "status": "ok", "output": "1", "scores": {"accuracy": 1.0}, "latency_s": 0.1}
    outcome = Outcome("s1", "all", row=row, messages=request.messages)
    from evalkit.summary import Summary

    summary = Summary.model_construct(benchmark="vis", headline="accuracy")
    files: dict = {}
    info, spans = build_trace(outcome, tmp_path, "run1", "0", summary, 0.0, files)
    parts = spans[0].inputs["messages"][0]["content"]
    refs = [Attachment.parse_ref(p["image_url"]["url"]) for p in parts[1:]]
    assert all(r is not None and r["trace_id"] == info.trace_id for r in refs)
    assert set(files) == {r["attachment_id"] for r in refs}
    assert files[refs[0]["attachment_id"]] == ("image/png", small.data)  # small: the image itself
    with PILImage.open(io.BytesIO(files[refs[1]["attachment_id"]][1])) as img:
        assert max(img.size) == TRACE_IMAGE_SIDE  # large: shown at a bounded size
    assert [f["sha256"] for f in spans[0].inputs["images"]] == [small.sha256, large.sha256]
    assert "base64" not in json.dumps(spans[0].inputs)


# ---- whole commands --------------------------------------------------------------------------
@pytest.mark.slow
def test_the_example_task_and_the_vision_suite_run_offline_to_one(tmp_path: Path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "evalkit", "benchmark=shapes_count", "model=reference",
                           f"run.output_root={out}"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = list((out / "runs" / "shapes_count" / "reference").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["accuracy"] == 1.0
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    digests = {f["sha256"] for r in rows for f in r["images"]}
    assert len(digests) == 16 and {p.stem for p in (run_dir / "images").iterdir()} == digests
    assert "## Images" in (run_dir / "report.md").read_text()
    attachments = list((out / "mlartifacts").rglob("attachments/*"))
    assert len([p for p in attachments if p.is_file()]) == 16  # one per image of each traced sample
    suite = yaml.safe_load((REPO_ROOT / "suites" / "vision.yaml").read_text())
    assert [e["benchmark"] for e in suite] == ["shapes_count"]
    rescored = subprocess.run([sys.executable, "-m", "evalkit.rescore", str(run_dir)], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=900)  # fmt: skip
    assert rescored.returncode == 0, rescored.stderr[-2000:]
    replayed = subprocess.run([sys.executable, "-m", "evalkit", "benchmark=shapes_count", "model=replay", f"model.path={run_dir}",
                               "tracking=none", f"run.output_root={out}"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    (replay_dir,) = list((out / "runs" / "shapes_count" / "replay").iterdir())
    assert json.loads((replay_dir / "summary.json").read_text())["metrics"]["accuracy"] == 1.0
    assert {p.name for p in (replay_dir / "images").iterdir()} == {p.name for p in (run_dir / "images").iterdir()}


@pytest.mark.slow
def test_a_hostile_image_is_one_line_and_exit_2_before_anything_starts(tmp_path: Path):
    conf = tmp_path / "conf" / "benchmark"
    conf.mkdir(parents=True)
    write(tmp_path, "bomb.png", huge_png())
    (tmp_path / "data" / "rows.jsonl").write_text(json.dumps({"id": "x", "q": "Q", "a": "1", "img": "bomb.png"}) + "\n")
    spec = {"name": "hostile", "kind": "task", "dataset": {"path": str(tmp_path / "data" / "rows.jsonl"),
            "fields": {"input": "q", "target": "a", "images": "img"}}, "prompt": {"template": "{{ input }}"},
            "scorers": [{"kind": "exact_match"}]}  # fmt: skip
    (conf / "hostile.yaml").write_text(yaml.safe_dump(spec))
    import os

    env = {**os.environ, "EVALKIT_CONFIG_DIR": str(tmp_path / "conf")}
    proc = subprocess.run([sys.executable, "-m", "evalkit", "benchmark=hostile", "model=reference", f"run.output_root={tmp_path / 'out'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "row 1" in errors[0] and "img" in errors[0]
    assert not (tmp_path / "out" / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("serve_artifacts", [True, False])
def test_a_servers_traces_serve_the_images_the_ui_asks_for(tmp_path: Path, serve_artifacts: bool):
    """Against a real ``mlflow server``, with and without ``--serve-artifacts``: each trace's
    span inputs reference attachments the server hands out by the UI's own endpoint."""
    import urllib.request

    from mlflow.tracing.attachments import Attachment

    from tests.support.mlflow_server import mlflow_server

    with mlflow_server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", tmp_path, serve_artifacts=serve_artifacts) as srv:
        srv.wait_ready()
        proc = subprocess.run([sys.executable, "-m", "evalkit", "benchmark=shapes_count", "model=reference", "run.limit=2",
                               f"run.output_root={tmp_path / 'out'}", f"tracking.tracking_uri={srv.url}"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        import mlflow
        from mlflow.tracing.client import TracingClient

        mlflow.set_tracking_uri(srv.url)
        exp = mlflow.get_experiment_by_name("evalkit")
        traces = TracingClient(srv.url).search_traces(locations=[exp.experiment_id], max_results=10)
        assert len(traces) == 2
        for trace in traces:
            parts = trace.data.spans[0].inputs["messages"][-1]["content"]
            for part in parts[1:]:
                ref = Attachment.parse_ref(part["image_url"]["url"])
                url = f"{srv.url}/ajax-api/3.0/mlflow/get-trace-artifact?request_id={ref['trace_id']}&path={ref['attachment_id']}"
                with urllib.request.urlopen(url, timeout=60) as answer:
                    data = answer.read()
                assert data.startswith(b"\x89PNG") and len(data) == ref["size"]
