"""Hostile model outputs: a scorer reads text written by the model under evaluation, which
may be adversarial. Model text never reaches the file system or the network."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings

#: the SOBHard schema_gen question whose answer is used as a JSON Schema (#28)
SCHEMA_GEN_ID = "16"


class _CountingServer:
    """An HTTP server on 127.0.0.1 that answers every GET with a permissive schema and
    records the paths asked for."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                hits.append(self.path)
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def counting_server():
    server = _CountingServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def schema_question(shared_data_dir: Path):
    bench = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard"))
    return bench, {s.id: s for s in bench.load()}[SCHEMA_GEN_ID]


def _reference_schema(bench: SOBHard, sample) -> dict:
    """The gold schema of the question (YAML in the reference answer), as a dict."""
    import yaml

    text = bench.reference_output(sample)
    body = text.split("\n", 1)[1].rsplit("```", 1)[0]
    return yaml.safe_load(body)


def _hostile_schemas(gold: dict, url: str, secret: Path) -> dict[str, dict]:
    """Schemas that would validate the document if their external references were
    followed (each points at a permissive ``{}``, a local file or an endless one)."""
    return {
        "file": {**gold, "items": {"$ref": secret.as_uri()}},
        "dev_zero": {**gold, "items": {"$ref": "file:///dev/zero"}},
        "http": {**gold, "items": {"$ref": f"{url}/evil.json"}},
        "relative_to_id": {"$id": f"{url}/root.json", **gold, "items": {"$ref": "item.json"}},
        "nested_id": {**gold, "items": {"$id": f"{url}/sub/", "allOf": [{"$ref": "x.json"}]}},
        "schema_keyword": {"$schema": f"{url}/meta.json", **gold, "items": {"$ref": f"{url}/a.json#/b"}},
        "dynamic_ref": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            **gold,
            "items": {"$dynamicRef": f"{url}/dyn.json#meta"},
        },
    }


def test_reference_schema_still_validates(schema_question):
    bench, sample = schema_question
    scored = bench.score(sample, bench.reference_output(sample))
    assert scored.scores["sample_pass"] == 1.0
    assert "schema.validates_source" not in scored.failed_checks


def test_model_schema_never_reads_files_or_the_network(schema_question, counting_server, tmp_path):
    bench, sample = schema_question
    gold = _reference_schema(bench, sample)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"description": "TOPSECRET-7f3a"}), encoding="utf-8")
    for name, schema in _hostile_schemas(gold, counting_server.url, secret).items():
        answer = "```yaml\n" + json.dumps(schema) + "\n```"  # JSON is YAML: the fence tag is right
        scored = bench.score(sample, answer)
        assert "schema.validates_source" in scored.failed_checks, name
        assert scored.scores["sample_pass"] == 0.0, name
        text = json.dumps({"detail": scored.detail, "parsed": scored.parsed})
        assert "TOPSECRET-7f3a" not in text, name
        if name in {"file", "http", "relative_to_id"}:
            assert "unresolvable $ref" in (scored.detail or ""), (name, scored.detail)
    assert counting_server.hits == []


def test_internal_refs_still_resolve(schema_question):
    bench, sample = schema_question
    gold = _reference_schema(bench, sample)
    schema = {**gold, "definitions": {"item": gold["items"]}, "items": {"$ref": "#/definitions/item"}}
    scored = bench.score(sample, "```yaml\n" + json.dumps(schema) + "\n```")
    assert "schema.validates_source" not in scored.failed_checks, scored.detail
    dangling = {**gold, "items": {"$ref": "#/definitions/nothere"}}
    scored = bench.score(sample, "```yaml\n" + json.dumps(dangling) + "\n```")
    assert "schema.validates_source" in scored.failed_checks
    assert "unresolvable $ref" in scored.detail
