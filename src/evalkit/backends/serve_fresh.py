"""Launcher of llama.cpp's OpenAI-compatible server that evaluates every prompt afresh.

llama-cpp-python reuses the KV cache of the prefix a prompt shares with the previous
request and evaluates only the rest; the different batch shape changes the logits in the
last bits and, at near-ties, the greedy token. Temperature-0 output then depends on which
request came before. Forgetting the cached prefix before each generation makes output a
function of the prompt alone (recipe: shared/design/local_model.md §2.4; pinned to
llama-cpp-python 0.3.36, whose ``Llama.generate`` and ``n_tokens`` this relies on).

It also ends the server once the process that started it is gone (:func:`_exit_with_parent`).
Both launches go through it: with :data:`KEEP_PREFIX` (``backend.fresh_prompt_eval=false``)
the server keeps llama.cpp's own prefix reuse and only the parent watch is added.

Run as ``python -m evalkit.backends.serve_fresh [--keep_prompt_prefix] <llama_cpp.server flags>``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: seconds between two looks at the parent process
PARENT_POLL_S = 1.0
#: evalkit's own flag, taken off the command line before llama.cpp's server reads it: keep
#: llama.cpp's reuse of the cached prompt prefix (``backend.fresh_prompt_eval=false``)
KEEP_PREFIX = "--keep_prompt_prefix"


def _patch() -> None:
    import llama_cpp

    original = llama_cpp.Llama.generate

    def generate(self, tokens, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.n_tokens = 0  # forget the cached prefix: the whole prompt is evaluated
        return original(self, tokens, *args, **kwargs)

    llama_cpp.Llama.generate = generate


def _exit_with_parent() -> None:
    """End this server once its parent (the evalkit process that started it) is gone.

    evalkit stops its server when it ends, even on Ctrl-C or an error; a SIGKILLed driver
    cannot, and the server, started in a session of its own, would outlive it for good
    (its memory and port held; each resume of the run started one more). A daemon thread
    sees the parent change (the orphan is re-parented) within :data:`PARENT_POLL_S`, then
    sends this process SIGTERM (the server's own shutdown), and exits it outright 10 s later.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def main() -> None:
    _exit_with_parent()
    if KEEP_PREFIX in sys.argv:
        sys.argv.remove(KEEP_PREFIX)
    else:
        _patch()
    from llama_cpp.server.__main__ import main as server_main

    server_main()


if __name__ == "__main__":
    main()
