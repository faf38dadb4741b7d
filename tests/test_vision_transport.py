"""Images on their way (issue 33's leftovers): a Hugging Face column holding a list of
``Image`` features loads as several images of a row, in order; ``run.batch`` input files
split by bytes and request count under the providers' limits, images inline; model workers
given each image by object reference (put once per digest), never its bytes in every call."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from PIL import Image as PILImage

from evalkit.benchmarks.task.benchmark import TaskBenchmark
from evalkit.benchmarks.task.settings import TaskSettings


def png(colour: tuple[int, int, int], size: tuple[int, int] = (16, 12)) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


# ---- a list of Image features: several images of one row ------------------------------------
def _image_list_parquet(path: Path, images: list[list[bytes]], hf_type: str | None) -> None:
    """A Parquet file whose ``imgs`` column is a list of ``{"bytes", "path"}`` structs (what
    ``datasets`` writes for ``Sequence(Image())``); ``hf_type``: the feature's type recorded in
    the schema's ``huggingface`` metadata, as a dataset on the hub carries it (``List`` or
    ``Sequence``), ``None`` for none."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    meta = None
    if hf_type is not None:
        features = {"id": {"dtype": "string", "_type": "Value"}, "q": {"dtype": "string", "_type": "Value"},
                    "a": {"dtype": "string", "_type": "Value"}, "imgs": {"feature": {"_type": "Image"}, "_type": hf_type}}  # fmt: skip
        meta = {"huggingface": json.dumps({"info": {"features": features}})}
    schema = pa.schema([("id", pa.string()), ("q", pa.string()), ("a", pa.string()), ("imgs", pa.list_(struct))], metadata=meta)
    rows = {"id": [f"r{i}" for i in range(len(images))], "q": [f"Q{i}" for i in range(len(images))],
            "a": ["1"] * len(images), "imgs": [[{"bytes": b, "path": f"{j}.png"} for j, b in enumerate(row)] for row in images]}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows, schema=schema), path)


def _spec(dataset: dict) -> TaskSettings:
    return TaskSettings(**{"name": "vislist", "kind": "task", "dataset": {**dataset, "fields": {"id": "id", "input": "q", "target": "a",
                        "images": "imgs"}}, "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match"}]})  # fmt: skip


def _sent_images(bench: TaskBenchmark) -> list[list[bytes]]:
    """Each request's images as its messages order them (bytes)."""
    out = []
    for sample in bench.load():
        request = bench.build(sample, 0)
        parts = [p for m in request.messages for p in (m["content"] if isinstance(m["content"], list) else [])]
        out.append([request.images[p["evalkit_image"]["sha256"]] for p in parts if "evalkit_image" in p])
    return out


IMAGES = [[png((200, 0, 0)), png((0, 200, 0)), png((0, 0, 200))], [png((9, 9, 9))]]


def test_a_local_parquet_list_of_image_structs_is_several_images_in_order(tmp_path: Path) -> None:
    path = tmp_path / "data" / "rows.parquet"
    _image_list_parquet(path, IMAGES, None)
    bench = TaskBenchmark(_spec({"path": str(path)}))
    bench.check()
    assert _sent_images(bench) == IMAGES


@pytest.mark.slow  # datasets' first import and its builder take seconds
@pytest.mark.parametrize("hf_type", ["List", "Sequence"])
def test_a_hub_column_that_is_a_list_of_image_features_is_several_images_in_order(tmp_path: Path, monkeypatch,
                                                                                     hf_type: str) -> None:  # fmt: skip
    """A dataset whose column is ``Sequence(Image())``: ``datasets`` decodes each image to a
    Pillow object unless told otherwise; evalkit reads them undecoded (its own checks, its own
    bytes), several per row, in the row's order. The dataset is a local folder (``hub`` takes a
    path as ``datasets.load_dataset`` does): nothing is downloaded."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    folder = tmp_path / "hubdata"
    _image_list_parquet(folder / "test.parquet", IMAGES, hf_type)
    features = datasets.load_dataset(str(folder), split="test", cache_dir=str(tmp_path / "hf-cache")).features
    assert isinstance(features["imgs"].feature, datasets.Image) and features["imgs"].feature.decode  # decoded by default
    bench = TaskBenchmark(_spec({"hub": str(folder), "revision": "main", "split": "test"}))
    bench.check()
    assert _sent_images(bench) == IMAGES
