"""The model worker's own rules, without Ray: what it keeps of a run that has ended, and
what it sends back when solving raises (tests/engine/test_crash_resume.py runs it in Ray)."""

from __future__ import annotations

import asyncio
import pickle

from evalkit.engine.executor import ModelWorker, _portable


class NeedsTwo(Exception):
    """Like many of litellm's exceptions: ``__init__`` needs arguments ``args`` does not keep."""

    def __init__(self, message: str, provider: str):
        super().__init__(message)
        self.provider = provider


def test_an_exception_that_cannot_be_read_back_travels_as_a_runtime_error_naming_it():
    try:
        raise NeedsTwo("quota gone", "acme")
    except NeedsTwo as exc:
        portable = _portable(exc)
    assert isinstance(portable, RuntimeError)
    assert str(portable).startswith("NeedsTwo: quota gone (raised in a model worker)")
    assert "raise NeedsTwo" in str(portable)  # its traceback
    assert isinstance(pickle.loads(pickle.dumps(portable)), RuntimeError)
    plain = ValueError("bad")
    assert _portable(plain) is plain


def test_a_run_forgotten_while_it_registers_stays_forgotten():
    """``configure`` waits for the run's object; the run ends (``forget``) meanwhile: the
    worker must not register it afterwards (in a sweep it would be kept for the sweep's life)."""

    async def scenario() -> dict:
        worker = ModelWorker(lambda: None, None)
        loop = asyncio.get_running_loop()
        payload: asyncio.Future = loop.create_future()
        configuring = asyncio.ensure_future(worker.configure("job-1", [payload]))
        await asyncio.sleep(0)
        worker.forget("job-1")
        payload.set_result((object(), {}, {}, None))
        await configuring
        await worker.configure("job-2", [asyncio.sleep(0, result=(object(), {}, {}, None))])
        return worker.runs

    assert set(asyncio.run(scenario())) == {"job-2"}
