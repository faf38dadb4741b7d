"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for fault tests.

It is the network edge of the tests: evalkit reaches it through litellm exactly as it
would reach a provider. Behaviour is a *plan* set over HTTP (``POST /_plan``) or from
Python (:meth:`FakeOpenAI.set_plan`):

    {"default": {"content": "[]", "latency_s": 0.0},
     "rules": [{"match": "substring of the last message",
                "model": "judge-b",              # optional: only requests for this model (the body's "model")
                "statuses": [500, "reset", 429], # the 1st, 2nd ... attempt of that prompt
                "retry_after": 1,                #   behaves so, later attempts succeed
                "always_status": 400,            # every attempt behaves so (status or fault)
                "content": "...", "empty": false, "null_with_reasoning": false,
                "reasoning_content": "...",      # the provider's reasoning field beside content
                "think_prefix": "...",           # content = think_prefix + "\n</think>\n\n" + content
                                                 #   (an orphan closing tag: a served reasoning model
                                                 #   whose chat template swallowed the opening one)
                "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                          "reasoning_tokens": 3, "cached_tokens": 4},
                                                 # reported as given (a count left out is made
                                                 #   up from the text, see below), the last two
                                                 #   in completion_tokens_details / prompt_tokens_details
                "no_usage": false,               # true: the answer carries no usage block
                "finish_reason": "stop", "latency_s": 0.0,
                "hang_s": 300,                   # longest a "hang" holds the request
                "hold_until_answered": 11,       # answer only once 11 answers have been given
                "hold_s": 120,                   #   since the plan was set (at most hold_s
                                                 #   seconds); the log says "released_by":
                                                 #   "count" or "cap"
                "released_after_s": 1.0,         #   then wait 1 s more (answers already sent
                                                 #   reach the client first)
                "hold_until_arrived": 8,         # answer only once 8 requests have arrived
                                                 #   since the plan was set (at most hold_s
                                                 #   seconds): a wave answered together
                "malformed_body": "<html>",      # body of a "malformed" answer
                "trickle_bytes": 16,             # chunk size of a "trickle" body
                "trickle_delay_s": 0.05,         #   and the pause before each chunk
                "respond": "honest"}]}           # the content computed from the request's messages by
                                                 #   a judge behaviour of tests/support/careless_judges.py
                                                 #   (BEHAVIOURS: honest, first_json, obey, copier, ...)

An entry of ``statuses`` / ``always_status`` is an HTTP status (an error status carries
a ``Retry-After`` header when ``retry_after`` is set) or a fault:

* ``"reset"`` — the connection is aborted (TCP RST) without any HTTP response;
* ``"hang"`` — no response at all until the client gives up (disconnects) or ``hang_s``
  passes, then the connection is dropped: longer than any client ``timeout``;
* ``"malformed"`` — status 200 and a body that is not a completion: ``malformed_body``
  if set (sent as ``text/html`` unless it starts with ``{``), else a completion object
  cut off mid-way sent as ``application/json``;
* ``"trickle"`` — the normal successful answer, its body sent ``trickle_bytes`` at a time
  with ``trickle_delay_s`` before each chunk (a slow but healthy server).

A plan may also set ``"capacity": K`` (with an optional ``"capacity_retry_after"``):
a request arriving while K are being served is answered 429 at once — a provider's
rate limit, for testing how the client backs off.

A rule (or ``default``) may replace the fixed ``latency_s`` by a per-sample latency
drawn from a distribution, the same for a given prompt whatever the arrival order or the
client (for benchmarks comparing clients on one workload):

    "latency_profile": {"kind": "lognormal", "median_s": 2.0, "sigma": 1.0,
                        "cap_s": 60.0, "seed": 0,
                        "index_pattern": "sample (\\d+)"}   # the default pattern

The sample index is the first group of ``index_pattern`` searched in the last message;
the latency is :func:`profile_latency` of the profile and that index (``latency_s`` when
the pattern does not occur).

``latency_s`` is waited before any of these. The first rule whose ``match`` occurs in the
last message (the prompt, for ``/v1/completions``) applies; ``default`` otherwise.
evalkit never sends ``stream=true``; a streamed request is answered 400 so that a change
there shows up as failures instead of passing unnoticed.

Every request is logged (``GET /_log`` or :attr:`FakeOpenAI.log`) with the hash of its
messages, its attempt number for that hash, the whole ``messages`` list it carried (chat),
its sampling parameters (``params``), the reasoning controls it carried (``reasoning``:
``reasoning_effort`` / ``thinking`` when sent), the other non-standard body fields
(``extra``: what ``extra_body`` adds), the usage it was answered with (``usage``) and the
status (or fault name) it got, with ``t`` and ``done``: when it arrived and when its
handling ended (Unix seconds; the requests being served at any instant are those with
``t <= instant < done``, :func:`in_flight_peak`).

Without a scripted ``usage`` an answer reports ``prompt_tokens`` = characters of the last
message // 4 (at least 1) and ``completion_tokens`` = characters of the content // 4.

**Files and Batches** (OpenAI's batch API, as litellm's ``acreate_file``, ``acreate_batch``,
``aretrieve_batch``, ``afile_content``, ``acancel_batch`` and ``alist_batches`` reach it):
``POST /v1/files`` (multipart upload, ``purpose=batch``), ``GET /v1/files`` (newest
first), ``GET /v1/files/{id}``,
``GET /v1/files/{id}/content``, ``POST /v1/batches``, ``GET /v1/batches/{id}``,
``POST /v1/batches/{id}/cancel``, ``GET /v1/batches``. Each request line of a batch is
answered by the same rules as a live request (its body's last message picks the rule; a
rule's ``always_status`` other than 200 puts the line in the error file with that status).
A batch moves one status per ``polls_per_status`` retrieves: ``validating`` →
``in_progress`` → ``finalizing`` → ``completed`` (output and error files set). The plan's
``"batch"`` entry (changed alone with :meth:`FakeOpenAI.set_batch_plan`) scripts it:

    "batch": {"polls_per_status": 1,
              "hold": false,                     # true: a batch stays in_progress
              "expire_after": 3,                 # the batch expires with only its first 3
                                                 #   lines answered; the rest are batch_expired
              "fail_validation": false,          # the batch fails validating (no output)
              "max_requests": 50000,             # a larger input file is refused (HTTP 400)
              "max_bytes": 209715200,
              "upload_hold_s": 0}                # an upload is kept, then answered only after
                                                 #   this long, a space sent every 0.5 s meanwhile
                                                 #   (no read of the client's ever times out)

:attr:`FakeOpenAI.batch_submissions` counts ``POST /v1/batches`` (what a provider bills),
:attr:`FakeOpenAI.batch_log` holds each submission's ``{"batch_id", "input_file_id",
"custom_ids", "endpoint", "bodies"}``; answering a batch adds nothing to :attr:`log`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import re
import socket
import struct
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

#: scripted behaviours other than an HTTP status
FAULTS = ("reset", "hang", "malformed", "trickle")
_TRANSPORT = "fake_openai.transport"
#: request body fields of the OpenAI API the log keeps apart; anything else (extra_body) is "extra"
_PARAMS = ("temperature", "max_tokens", "top_p", "stop", "seed")
#: the reasoning controls litellm sends (``reasoning_effort``; Anthropic-style ``thinking``)
_REASONING = ("reasoning_effort", "thinking")
_STANDARD_FIELDS = {"model", "messages", "prompt", "stream", "n", *_PARAMS, *_REASONING}


def profile_latency(profile: dict[str, Any], index: int) -> float:
    """Seconds a request of sample ``index`` waits under a ``latency_profile`` plan entry:
    a lognormal draw (median ``median_s``, shape ``sigma``) capped at ``cap_s``, from a
    generator seeded by the profile's ``seed`` and the index alone, so a benchmark script
    can compute every request's latency in advance."""
    kind = profile.get("kind", "lognormal")
    if kind != "lognormal":
        raise ValueError(f"latency_profile: unknown kind {kind!r}")
    rng = random.Random(f"{profile.get('seed', 0)}:{index}")
    draw = rng.lognormvariate(math.log(float(profile.get("median_s", 1.0))), float(profile.get("sigma", 1.0)))
    return min(draw, float(profile.get("cap_s", math.inf)))


def _latency_of(rule: dict[str, Any], text: str) -> float:
    profile = rule.get("latency_profile")
    if profile:
        m = re.search(profile.get("index_pattern", r"sample (\d+)"), text)
        if m:
            return profile_latency(profile, int(m.group(1)))
    return float(rule.get("latency_s") or 0.0)


def in_flight_peak(log: list[dict[str, Any]], start: float = 0.0, end: float = float("inf")) -> int:
    """The most requests of ``log`` (entries of :attr:`FakeOpenAI.log`) being served at once
    at an instant in ``[start, end)``, whatever their answer (a rejected one counts for no
    time); an entry still being served counts until ``end``."""
    events = []
    for entry in log:
        t, done = entry["t"], entry.get("done", end)
        if done > t and t < end and done > start:
            events += [(max(t, start), 1), (done, -1)]
    peak = current = 0
    for _, step in sorted(events):  # an end sorts before a start at the same instant
        current += step
        peak = max(peak, current)
    return peak


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeOpenAI:
    def __init__(self) -> None:
        self.port = _free_port()
        self.plan: dict[str, Any] = {"default": {"content": "[]"}, "rules": []}
        self.log: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.api = self._make_app()
        self.app = self._asgi(self.api)
        self._server: uvicorn.Server | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        #: successful answers given since the plan was set (what ``hold_until_answered`` counts)
        self.answered = 0
        self._thread: threading.Thread | None = None
        self._reset_batches()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- control ----------------------------------------------------------------------
    def set_plan(self, plan: dict[str, Any]) -> None:
        with self._lock:
            self.plan = {"default": {"content": "[]"}, "rules": [], **plan}
            self.log = []
            self.attempts = {}
            self.max_in_flight = 0
            self.answered = 0
            self._reset_batches()

    def set_batch_plan(self, batch: dict[str, Any]) -> None:
        """Change the plan's ``"batch"`` entry alone (files, batches and counters kept)."""
        with self._lock:
            self.plan = {**self.plan, "batch": dict(batch)}

    def _reset_batches(self) -> None:
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.batch_polls: dict[str, int] = {}
        self.batch_submissions = 0
        self.batch_log: list[dict[str, Any]] = []

    def requests_for(self, needle: str) -> list[dict[str, Any]]:
        return [r for r in self.log if needle in r["last"]]

    # ---- behaviour --------------------------------------------------------------------
    def _rule_for(self, text: str, model: Any = None) -> dict[str, Any]:
        for rule in self.plan.get("rules", []):
            if rule.get("match") and rule["match"] in text and rule.get("model", model) == model:
                return {**self.plan.get("default", {}), **rule}
        return dict(self.plan.get("default", {}))

    async def _answer(self, request: Request, body: dict[str, Any], chat: bool) -> Response:
        if chat:
            messages = body.get("messages") or []
            last = str(messages[-1].get("content", "")) if messages else ""
            key_src = json.dumps(messages, sort_keys=True, ensure_ascii=False)
        else:
            last = str(body.get("prompt", ""))
            key_src = last
        key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
        with self._lock:
            rule = self._rule_for(last if chat else key_src, body.get("model"))
            n = self.attempts.get(key, 0)
            self.attempts[key] = n + 1
        status: int | str = 200
        statuses = rule.get("statuses") or []
        if rule.get("always_status"):
            status = rule["always_status"]
        elif n < len(statuses):
            status = statuses[n]
        if body.get("stream"):
            status = 400
        status = status if status in FAULTS else int(status)
        entry = {
            "key": key, "attempt": n + 1, "status": status, "last": last, "t": time.time(),
            "params": {k: body.get(k) for k in _PARAMS},
            "reasoning": {k: body[k] for k in _REASONING if k in body},
            "model": body.get("model"), "messages": body.get("messages") if chat else None,
            "extra": {k: v for k, v in body.items() if k not in _STANDARD_FIELDS},
        }  # fmt: skip
        with self._lock:
            capacity = self.plan.get("capacity")
            over = bool(capacity) and status == 200 and self.in_flight >= int(capacity)
            if over:
                entry["status"] = 429
                entry["done"] = entry["t"]
            self.log.append(entry)
            if not over:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if over:  # rejected at once, never counted as in flight
            retry_after = self.plan.get("capacity_retry_after")
            return JSONResponse(
                {"error": {"message": "rate limit: over capacity", "type": "scripted", "code": 429}},
                status_code=429,
                headers={"Retry-After": str(retry_after)} if retry_after is not None else {},
            )
        try:
            latency = _latency_of(rule, last if chat else key_src)
            if latency:
                await asyncio.sleep(latency)
            if rule.get("hold_until_answered"):
                target = int(rule["hold_until_answered"])
                deadline = time.monotonic() + float(rule.get("hold_s", 120))
                while self.answered < target and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                entry["released_by"] = "count" if self.answered >= target else "cap"
                await asyncio.sleep(float(rule.get("released_after_s", 0.0)))
            if rule.get("hold_until_arrived"):
                target = int(rule["hold_until_arrived"])
                deadline = time.monotonic() + float(rule.get("hold_s", 120))
                while len(self.log) < target and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            if status == "hang":
                deadline = time.monotonic() + float(rule.get("hang_s", 300))
                while time.monotonic() < deadline and not await _disconnected(request):
                    await asyncio.sleep(0.05)
                status = "reset"
        finally:
            with self._lock:
                self.in_flight -= 1
                entry["done"] = time.time()
        if status == "reset":
            return await _reset(request)
        if status == "malformed":
            garbage = rule.get("malformed_body") or f'{{"id": "fake-{key}-{n}", "object": "chat.completion", "choices": [{{"ind'
            return Response(garbage, media_type="application/json" if garbage.startswith("{") else "text/html")
        if status != 200 and status != "trickle":
            headers = {}
            if rule.get("retry_after") is not None:
                headers["Retry-After"] = str(rule["retry_after"])
            message = "stream=true is not scripted" if body.get("stream") else f"scripted {status}"
            return JSONResponse(
                {"error": {"message": message, "type": "scripted", "code": status}},
                status_code=status,
                headers=headers,
            )
        answer = _completion(rule, body, chat, last, f"fake-{key}-{n}")
        entry["usage"] = answer.get("usage")
        with self._lock:
            self.answered += 1
        if status == "trickle":
            return _trickle(json.dumps(answer).encode(), int(rule.get("trickle_bytes", 16)), float(rule.get("trickle_delay_s", 0.05)))
        return JSONResponse(answer)

    @staticmethod
    def _asgi(api: FastAPI) -> Any:
        """The ASGI app uvicorn serves: ``api`` with the connection's transport in the scope
        (uvicorn's ``receive`` is a method of its request cycle, which holds the transport),
        so that a ``reset`` can abort the connection."""

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            cycle = getattr(receive, "__self__", None)
            scope[_TRANSPORT] = getattr(cycle, "transport", None)
            await api(scope, receive, send)

        return app

    def _make_app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "fake", "object": "model"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await self._answer(request, await request.json(), chat=True)

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            return await self._answer(request, await request.json(), chat=False)

        self._batch_routes(app)

        @app.post("/_plan")
        async def plan(request: Request) -> dict[str, str]:
            self.set_plan(await request.json())
            return {"ok": "plan set"}

        @app.get("/_log")
        async def get_log() -> list[dict[str, Any]]:
            return self.log

        @app.get("/_stats")
        async def stats() -> dict[str, Any]:
            return {"requests": len(self.log), "max_in_flight": self.max_in_flight}

        return app


    # ---- files and batches --------------------------------------------------------------
    def _batch_routes(self, app: FastAPI) -> None:
        @app.post("/v1/files")
        async def upload(request: Request) -> Response:
            fields = _multipart(request.headers.get("content-type", ""), await request.body())
            data, filename = fields.get("file", (b"", "upload.jsonl"))
            purpose = fields.get("purpose", (b"batch", None))[0].decode()
            with self._lock:
                file_id = f"file-fake{len(self.files) + 1}"
                self.files[file_id] = {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                       "filename": filename or "upload.jsonl", "purpose": purpose, "status": "processed",
                                       "_data": data}  # fmt: skip
            hold = float(self._batch_plan().get("upload_hold_s", 0))
            if hold:  # the connection kept alive (a space every 0.5 s: no read ever times out), the answer withheld
                return StreamingResponse(self._held(request, hold, json.dumps(_public(self.files[file_id])).encode()),
                                         media_type="application/json")  # fmt: skip
            return JSONResponse(_public(self.files[file_id]))

        @app.get("/v1/files")
        async def list_files(purpose: str | None = None) -> dict[str, Any]:
            found = [_public(f) for f in list(self.files.values())[::-1] if purpose in (None, f["purpose"])]
            return {"object": "list", "data": found, "has_more": False}

        @app.get("/v1/files/{file_id}")
        async def file_info(file_id: str) -> Response:
            found = self.files.get(file_id)
            return JSONResponse(_public(found)) if found else _not_found(f"no file {file_id}")

        @app.get("/v1/files/{file_id}/content")
        async def file_content(file_id: str) -> Response:
            found = self.files.get(file_id)
            return Response(found["_data"], media_type="application/octet-stream") if found else _not_found(f"no file {file_id}")

        @app.post("/v1/batches")
        async def create_batch(request: Request) -> Response:
            body = await request.json()
            return self._create_batch(body)

        @app.get("/v1/batches/{batch_id}")
        async def retrieve_batch(batch_id: str) -> Response:
            return self._retrieve_batch(batch_id)

        @app.post("/v1/batches/{batch_id}/cancel")
        async def cancel_batch(batch_id: str) -> Response:
            with self._lock:
                batch = self.batches.get(batch_id)
                if batch is None:
                    return _not_found(f"no batch {batch_id}")
                if batch["status"] in ("validating", "in_progress", "finalizing"):
                    batch.update(status="cancelling", cancelling_at=int(time.time()))
                return JSONResponse(_public(batch))

        @app.get("/v1/batches")
        async def list_batches(limit: int = 20, after: str | None = None) -> dict[str, Any]:
            ids = list(self.batches)[::-1]  # newest first, as OpenAI lists them
            if after in ids:
                ids = ids[ids.index(after) + 1 :]
            data = [_public(self.batches[i]) for i in ids[:limit]]
            return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                    "last_id": data[-1]["id"] if data else None, "has_more": len(ids) > limit}  # fmt: skip

    @staticmethod
    async def _held(request: Request, hold_s: float, body: bytes) -> Any:
        deadline = time.monotonic() + hold_s
        while time.monotonic() < deadline and not await _disconnected(request):
            yield b" "
            await asyncio.sleep(0.5)
        yield body

    def _batch_plan(self) -> dict[str, Any]:
        return {"polls_per_status": 1, **(self.plan.get("batch") or {})}

    def _create_batch(self, body: dict[str, Any]) -> Response:
        with self._lock:
            file = self.files.get(str(body.get("input_file_id")))
            if file is None:
                return _not_found(f"no file {body.get('input_file_id')}")
            lines = [json.loads(x) for x in file["_data"].decode("utf-8").splitlines() if x.strip()]
            plan = self._batch_plan()
            if len(lines) > int(plan.get("max_requests", 50_000)) or file["bytes"] > int(plan.get("max_bytes", 200 * 2**20)):
                return JSONResponse({"error": {"message": "batch input file over the limits", "type": "invalid_request_error",
                                               "code": 400}}, status_code=400)  # fmt: skip
            self.batch_submissions += 1
            batch_id = f"batch_fake{len(self.batches) + 1}"
            now = int(time.time())
            self.batches[batch_id] = {
                "id": batch_id, "object": "batch", "endpoint": body.get("endpoint"), "errors": None,
                "input_file_id": file["id"], "completion_window": body.get("completion_window", "24h"),
                "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": now,
                "in_progress_at": None, "expires_at": now + 86400, "finalizing_at": None, "completed_at": None,
                "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0}, "metadata": body.get("metadata"),
                "_lines": lines,
            }  # fmt: skip
            self.batch_polls[batch_id] = 0
            self.batch_log.append({"batch_id": batch_id, "input_file_id": file["id"], "endpoint": body.get("endpoint"),
                                   "custom_ids": [x.get("custom_id") for x in lines],
                                   "bodies": [x.get("body") for x in lines]})  # fmt: skip
            return JSONResponse(_public(self.batches[batch_id]))

    def _retrieve_batch(self, batch_id: str) -> Response:
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return _not_found(f"no batch {batch_id}")
            self.batch_polls[batch_id] += 1
            plan = self._batch_plan()
            if self.batch_polls[batch_id] % max(1, int(plan["polls_per_status"])) == 0:
                self._advance(batch, plan)
            return JSONResponse(_public(batch))

    def _advance(self, batch: dict[str, Any], plan: dict[str, Any]) -> None:
        """One step of a batch's life (called under the lock)."""
        now, status, counts = int(time.time()), batch["status"], batch["request_counts"]
        if status == "cancelling":
            batch.update(status="cancelled", cancelled_at=now)
        elif status == "validating" and plan.get("fail_validation"):
            batch.update(status="failed", failed_at=now,
                         errors={"object": "list", "data": [{"code": "invalid_request", "message": "scripted", "line": 1}]})
        elif status == "validating":
            batch.update(status="in_progress", in_progress_at=now)
        elif status == "in_progress" and plan.get("expire_after") is not None:
            self._finish(batch, int(plan["expire_after"]))
            batch.update(status="expired", expired_at=now)
        elif status == "in_progress" and not plan.get("hold"):
            counts["completed"] = counts["total"]
            batch.update(status="finalizing", finalizing_at=now)
        elif status == "finalizing":
            self._finish(batch, len(batch["_lines"]))
            batch.update(status="completed", completed_at=now)
        elif status == "in_progress":
            counts["completed"] = counts["total"] // 2  # held: half done, as a provider would report

    def _finish(self, batch: dict[str, Any], answered: int) -> None:
        """Answer the first ``answered`` lines by the plan's rules; write the output and error files."""
        out, err = [], []
        for i, line in enumerate(batch["_lines"]):
            body, custom_id = line.get("body") or {}, line.get("custom_id")
            chat = "chat" in str(line.get("url", ""))
            messages = body.get("messages") or []
            last = str(messages[-1].get("content", "")) if chat and messages else str(body.get("prompt", ""))
            request_id = f"req_{batch['id']}_{i}"
            if i >= answered:
                err.append({"id": f"batch_req_{i}", "custom_id": custom_id, "response": None,
                            "error": {"code": "batch_expired",
                                      "message": "This request could not be executed before the completion window expired."}})  # fmt: skip
                continue
            rule = self._rule_for(last)
            status = rule.get("always_status")
            if status is not None and status != 200 and status not in FAULTS:
                err.append({"id": f"batch_req_{i}", "custom_id": custom_id, "error": None,
                            "response": {"status_code": int(status), "request_id": request_id,
                                         "body": {"error": {"message": f"scripted {status}", "type": "scripted"}}}})  # fmt: skip
                continue
            answer = _completion(rule, body, chat, last, f"fake-batch-{batch['id']}-{i}")
            out.append({"id": f"batch_req_{i}", "custom_id": custom_id, "error": None,
                        "response": {"status_code": 200, "request_id": request_id, "body": answer}})  # fmt: skip
        batch["request_counts"].update(completed=len(out), failed=len([e for e in err if e["response"] is not None]))
        for field, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                file_id = f"file-fake{len(self.files) + 1}"
                data = "".join(json.dumps(r) + "\n" for r in rows).encode()
                self.files[file_id] = {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                       "filename": f"{field}.jsonl", "purpose": "batch_output", "status": "processed",
                                       "_data": data}  # fmt: skip
                batch[field] = file_id

    # ---- lifecycle --------------------------------------------------------------------
    def start(self) -> "FakeOpenAI":
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.time() + 20
        while not self._server.started:
            if time.time() > deadline:
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


def _completion(rule: dict[str, Any], body: dict[str, Any], chat: bool, last: str, answer_id: str) -> dict[str, Any]:
    """The successful answer a rule scripts (a chat or text completion object), as the live
    endpoints and the batch output file both carry it."""
    content: Any = rule.get("content", "")
    if rule.get("respond") and chat:
        from tests.support.careless_judges import BEHAVIOURS

        content = BEHAVIOURS[rule["respond"]](body.get("messages") or [])
    reasoning = rule.get("reasoning_content")
    if rule.get("think_prefix") is not None:
        content = f"{rule['think_prefix']}\n</think>\n\n{content}"
    if rule.get("empty"):
        content = ""
    if rule.get("null_with_reasoning"):
        content, reasoning = None, "thinking..."
    finish = rule.get("finish_reason", "stop")
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        choice = {"index": 0, "message": message, "finish_reason": finish}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": content, "finish_reason": finish, "logprobs": None}
        obj = "text_completion"
    answer = {"id": answer_id, "object": obj, "created": int(time.time()), "model": body.get("model", "fake"),
              "choices": [choice], "usage": _usage(rule.get("usage"), last, content)}  # fmt: skip
    if rule.get("no_usage"):
        del answer["usage"]
    return answer


def _public(obj: dict[str, Any]) -> dict[str, Any]:
    """A file or batch object as the API shows it (the server's own ``_`` fields left out)."""
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def _not_found(message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": 404}}, status_code=404)


def _multipart(content_type: str, data: bytes) -> dict[str, tuple[bytes, str | None]]:
    """``{field: (bytes, filename)}`` of a ``multipart/form-data`` body (the standard
    library's MIME parser: the fake server needs no python-multipart)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + data)
    fields: dict[str, tuple[bytes, str | None]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            fields[str(name)] = (part.get_payload(decode=True) or b"", part.get_filename())
    return fields


def _usage(scripted: dict[str, Any] | None, last: str, content: str | None) -> dict[str, Any]:
    """The answer's usage block: the scripted counts (``reasoning_tokens`` and
    ``cached_tokens`` put where OpenAI puts them); a count not scripted is made up from
    the text."""
    scripted = scripted or {}
    usage: dict[str, Any] = {
        "prompt_tokens": int(scripted.get("prompt_tokens", max(1, len(last) // 4))),
        "completion_tokens": int(scripted.get("completion_tokens", len(content or "") // 4)),
    }
    if scripted.get("reasoning_tokens") is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": int(scripted["reasoning_tokens"])}
    if scripted.get("cached_tokens") is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": int(scripted["cached_tokens"])}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


async def _disconnected(request: Request) -> bool:
    transport = request.scope.get(_TRANSPORT)
    if transport is not None and transport.is_closing():
        return True
    return await request.is_disconnected()


async def _reset(request: Request) -> Response:
    """Abort the connection with a TCP RST and no HTTP response at all."""
    transport = request.scope.get(_TRANSPORT)
    if transport is None:  # pragma: no cover - only under a server other than uvicorn
        raise RuntimeError("fake OpenAI server: 'reset' needs uvicorn's transport")
    sock = transport.get_extra_info("socket")
    if sock is not None and not transport.is_closing():
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
    for _ in range(3):  # let uvicorn see the connection lost; what follows is never sent
        await asyncio.sleep(0)
    return Response(status_code=204)


def _trickle(data: bytes, size: int, delay_s: float) -> StreamingResponse:
    async def chunks():
        for i in range(0, len(data), max(1, size)):
            await asyncio.sleep(delay_s)
            yield data[i : i + size]

    return StreamingResponse(chunks(), media_type="application/json")


def main() -> None:  # pragma: no cover - used by subprocess tests
    """Run standalone: ``python tests/support/fake_openai.py PORT_FILE [PORT [PLAN_FILE]]``
    writes its port (``PORT``: listen there, e.g. a server restarted on the port it had;
    ``PLAN_FILE``: the JSON plan it answers by from its first request on — a restarted
    server given its plan over HTTP would answer the requests arriving before with the
    default content)."""
    import sys

    server = FakeOpenAI()
    if len(sys.argv) > 2:
        server.port = int(sys.argv[2])
    if len(sys.argv) > 3:
        with open(sys.argv[3]) as fh:
            server.set_plan(json.load(fh))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            fh.write(str(server.port))
    config = uvicorn.Config(server.app, host="127.0.0.1", port=server.port, log_level="error", lifespan="off", backlog=4096)
    uvicorn.Server(config).run()


if __name__ == "__main__":  # pragma: no cover
    main()
