"""Image token estimates per OpenAI model (issue 49): OpenAI documents a patch rule for
gpt-4.1-mini and -nano, gpt-5-mini and -nano and o4-mini, and tile rules with other bases for
gpt-5, the o-series, gpt-4o-mini and computer-use-preview; each model gets its own, checked
against the documented examples (platform.openai.com, "Images and vision", calculating
costs). A model OpenAI documents none for keeps GPT-4o's tiles."""

from __future__ import annotations

import pytest

from evalkit.providers import (
    OPENAI_DEFAULT_RULE,
    image_tokens,
    openai_image_rule,
    openai_image_tokens,
    openai_patch_tokens,
)


def test_the_patch_rule_against_the_documented_examples() -> None:
    assert openai_patch_tokens(1024, 1024, 1.0) == 1024  # 32 × 32 patches
    assert openai_patch_tokens(1800, 2400, 1.0) == 1452  # scaled to 1056 × 1408: 33 × 44
    assert openai_patch_tokens(4096, 4096, 1.0) == 1521  # 16,384 patches: scaled to 1248 × 1248, 39 × 39
    assert openai_patch_tokens(33, 1, 1.0) == 2  # a partial patch counts whole
    assert openai_patch_tokens(1024, 1024, 1.62) == 1659  # × the model's multiplier, rounded up


@pytest.mark.parametrize("model, rule", [
    ("openai/gpt-4.1-mini-2025-04-14", ("patches", 1.62)),
    ("gpt-4.1-nano", ("patches", 2.46)),
    ("azure/gpt-5-mini", ("patches", 1.62)),
    ("gpt-5-nano-2025-08-07", ("patches", 2.46)),
    ("openai/o4-mini", ("patches", 1.72)),
    ("gpt-4o-mini-2024-07-18", ("tiles", 2833, 5667)),
    ("openai/gpt-5", ("tiles", 70, 140)),
    ("gpt-5-chat-latest", ("tiles", 70, 140)),
    ("o1", ("tiles", 75, 150)),
    ("o1-pro", ("tiles", 75, 150)),
    ("openai/o3-2025-04-16", ("tiles", 75, 150)),
    ("computer-use-preview", ("tiles", 65, 129)),
    ("openai/gpt-4.1-2025-04-14", ("tiles", 85, 170)),
    ("gpt-4o", ("tiles", 85, 170)),
    ("openai/my-vllm-model", OPENAI_DEFAULT_RULE),  # none documented: GPT-4o's, the estimate of last resort
    ("gpt-5.1", OPENAI_DEFAULT_RULE),  # a name that only begins like a documented one
])  # fmt: skip
def test_each_model_gets_its_documented_rule(model: str, rule: tuple) -> None:
    assert openai_image_rule(model) == rule


def test_image_tokens_follow_the_models_rule() -> None:
    assert image_tokens("openai/gpt-4o", 1024, 1024) == 765  # documented: 85 + 4 × 170
    assert image_tokens("openai/gpt-4.1-mini", 1024, 1024) == 1659  # 1024 patches × 1.62, not 765
    assert image_tokens("openai/gpt-4.1-mini", 1024, 1024, detail="low") == 1659  # detail does not apply to patches
    assert image_tokens("openai/o4-mini", 1800, 2400) == 2498  # 1452 × 1.72
    assert image_tokens("openai/gpt-5", 1024, 1024) == 70 + 4 * 140
    assert image_tokens("openai/gpt-5", 4096, 8192, detail="low") == 70
    assert image_tokens("openai/o3", 2048, 4096) == 75 + 6 * 150  # 768 × 1536: 2 × 3 tiles
    assert openai_image_tokens(2048, 4096, "high") == 1105  # the documented GPT-4o example, unchanged
