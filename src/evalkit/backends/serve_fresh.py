"""Launcher of llama.cpp's OpenAI-compatible server that evaluates every prompt afresh.

llama-cpp-python reuses the KV cache of the prefix a prompt shares with the previous
request and evaluates only the rest; the different batch shape changes the logits in the
last bits and, at near-ties, the greedy token. Temperature-0 output then depends on which
request came before. Forgetting the cached prefix before each generation makes output a
function of the prompt alone (recipe: shared/design/local_model.md §2.4; pinned to
llama-cpp-python 0.3.36, whose ``Llama.generate`` and ``n_tokens`` this relies on).

Run as ``python -m evalkit.backends.serve_fresh <llama_cpp.server flags>``.
"""

from __future__ import annotations


def _patch() -> None:
    import llama_cpp

    original = llama_cpp.Llama.generate

    def generate(self, tokens, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.n_tokens = 0  # forget the cached prefix: the whole prompt is evaluated
        return original(self, tokens, *args, **kwargs)

    llama_cpp.Llama.generate = generate


def main() -> None:
    _patch()
    from llama_cpp.server.__main__ import main as server_main

    server_main()


if __name__ == "__main__":
    main()
