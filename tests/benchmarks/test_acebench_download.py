"""ACEBench download (benchmark.data_dir=None): a GitHub-shaped archive served on 127.0.0.1."""

from __future__ import annotations

import functools
import http.server
import io
import json
import socket
import tarfile
import threading
from pathlib import Path

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.download import PROMPT_MODULES, USER_SIM_MODULE
from evalkit.errors import DataError

COMMIT = "e6db74b735ead22c24f27367606a9408573b848f"
FIRST_TURN = "::APIUSER.get_init_prompt.first_user_turn."


def _module_sources(prompts: dict[str, str]) -> dict[str, str]:
    """Prompt modules generated from prompts.json: ``SYMBOL = <repr>`` plus, for the user
    simulator, a class whose method holds the opening lines in language branches."""
    sources = {path: "import os\n\n" for path in PROMPT_MODULES}
    for key, text in prompts.items():
        path, symbol = key.split("::", 1)
        if "." not in symbol:
            sources[path] += f"{symbol} = {text!r}\n\n"
    en = prompts[USER_SIM_MODULE + FIRST_TURN + "en"]
    zh = prompts[USER_SIM_MODULE + FIRST_TURN + "zh"]
    sources[USER_SIM_MODULE] += (
        "class APIUSER():\n"
        "    def __init__(self, language='zh'):\n"
        "        self.language = language\n\n"
        "    def get_init_prompt(self, question):\n"
        "        if self.language == 'zh':\n"
        "            if 'BaseApi' in question:\n"
        "                system_prompt = SYSTEM_PROMPT_BASE_ZH\n"
        "            self.messages = [{'role': 'system', 'content': system_prompt}, {'role': 'user', 'content': " + repr(zh) + "}]\n"
        "        elif self.language == 'en':\n"
        "            system_prompt = SYSTEM_PROMPT_BASE_EN\n"
        "            self.messages = [{'role': 'system', 'content': system_prompt}, {'role': 'user', 'content': " + repr(en) + "}]\n"
        "        return self.messages\n"
    )
    return sources


def _archive(acebench_dir: Path) -> bytes:
    prompts = json.loads((acebench_dir / "prompts.json").read_text(encoding="utf-8"))["prompts"]
    top = f"ACEBench-{COMMIT}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        for path in sorted((acebench_dir / "data_all").rglob("*.json")):
            add(path.relative_to(acebench_dir).as_posix(), path.read_bytes())
        add("LICENSE.md", (acebench_dir / "LICENSE.md").read_bytes())
        add("README.md", b"# not extracted\n")
        for path, source in _module_sources(prompts).items():
            add(path, source.encode("utf-8"))
    return buf.getvalue()


class _Handler(http.server.BaseHTTPRequestHandler):
    def __init__(self, *args, payload: bytes, hits: list, **kwargs):
        self.payload, self.hits = payload, hits
        super().__init__(*args, **kwargs)

    def do_GET(self):  # noqa: N802
        self.hits.append(self.path)
        if self.path != "/archive.tar.gz":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload)

    def log_message(self, *args):
        pass


@pytest.fixture()
def archive_server(acebench_dir):
    hits: list[str] = []
    handler = functools.partial(_Handler, payload=_archive(acebench_dir), hits=hits)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_download_extracts_data_and_builds_prompts_json(acebench_dir, archive_server, tmp_path):
    base, hits = archive_server
    settings = AceBenchSettings(cache_dir=tmp_path / "cache", source_url=f"{base}/archive.tar.gz", subsets=["special_incomplete"])
    bench = AceBench(settings)
    samples = bench.load()
    assert len(samples) == 50 and hits == ["/archive.tar.gz"]
    entries = [p for p in (tmp_path / "cache").iterdir()]
    assert len(entries) == 1 and not entries[0].name.startswith(".partial")  # temp dir renamed into place
    built = json.loads((entries[0] / "prompts.json").read_text(encoding="utf-8"))
    shared = json.loads((acebench_dir / "prompts.json").read_text(encoding="utf-8"))
    assert built == shared
    assert not (entries[0] / "README.md").exists()
    assert bench.data_fingerprints() == {"acebench_files/en": "d879d5c76149e46c2e01966cbcee0f510e04a59dd48cbbe8bfdd39664ce22ede"}
    # a second instance uses the cache, no new request
    again = AceBench(settings)
    assert len(again.load()) == 50 and hits == ["/archive.tar.gz"]


def test_download_http_error_is_data_error(archive_server, tmp_path):
    base, _ = archive_server
    bench = AceBench(AceBenchSettings(cache_dir=tmp_path, source_url=f"{base}/missing.tar.gz"))
    with pytest.raises(DataError, match="benchmark.data_dir"):
        bench.load()


def test_download_closed_port_is_one_line_data_error(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bench = AceBench(AceBenchSettings(cache_dir=tmp_path / "c", source_url=f"http://127.0.0.1:{port}/a.tar.gz"))
    with pytest.raises(DataError) as err:
        bench.load()
    message = str(err.value)
    assert "benchmark.data_dir=" in message and "\n" not in message
    assert not any((tmp_path / "c").glob(".partial*"))
