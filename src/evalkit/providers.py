"""What litellm knows about a provider, asked in one place: the reasoning parameters a
model accepts, its price, the token counts of an answer, and a prompt's token count.

Everything here goes through litellm's own helpers (``get_supported_openai_params``,
``get_optional_params``, ``get_model_info``, ``cost_per_token``, ``token_counter``);
litellm is imported on first use (:func:`litellm_module`), so a run of offline models and
a config without reasoning settings never import it.

Token counts (``usage``) are a dict of non-negative integers: ``prompt_tokens``,
``completion_tokens`` and, when the provider reports them, ``reasoning_tokens`` (inside
``completion_tokens``) and ``cached_prompt_tokens`` (inside ``prompt_tokens``); ``None``
when the provider reported no usage at all — never zeros.

Prices are USD per token (:class:`Price`); a cost is
``(prompt − cached)·input + cached·cached_input + completion·output`` (reasoning tokens are
inside completion tokens, cached ones inside prompt tokens), as litellm's
``cost_per_token`` computes it.
"""

from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

log = logging.getLogger("evalkit")

#: the keys of a ``usage`` dict, in the order they are reported
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_prompt_tokens")
#: a ``model_cost`` entry evalkit registered at zero cost only to spare litellm's lookups
#: (``models/litellm_client._price_unknown_model``): never a price
UNPRICED_MARK = "evalkit_unpriced"


def litellm_module() -> Any:
    """litellm, imported with its local cost map (no remote fetch at import)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # deferred: litellm's import is heavy; offline runs never need it

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


@contextmanager
def _quiet_litellm() -> Iterator[None]:
    """litellm's own logger silenced (it warns on the console about what it drops)."""
    logger = logging.getLogger("LiteLLM")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


# ------------------------------------------------------------------------------------------
# tokens
# ------------------------------------------------------------------------------------------
def usage_counts(usage: Any) -> dict[str, int] | None:
    """The ``usage`` dict of a litellm response's ``usage`` object (or a plain dict of the
    OpenAI shape). litellm fills a missing usage block with zeros, so a block whose prompt
    and completion counts are both 0 reported nothing (every request has a prompt): ``None``."""
    if usage is None:
        return None
    get = usage.get if isinstance(usage, dict) else lambda k, d=None: getattr(usage, k, d)
    prompt, completion = int(get("prompt_tokens", 0) or 0), int(get("completion_tokens", 0) or 0)
    if prompt == 0 and completion == 0:
        return None
    out = {"prompt_tokens": prompt, "completion_tokens": completion}
    for key, details, field in (("reasoning_tokens", "completion_tokens_details", "reasoning_tokens"),
                                ("cached_prompt_tokens", "prompt_tokens_details", "cached_tokens")):  # fmt: skip
        block = get(details, None)
        value = block.get(field) if isinstance(block, dict) else getattr(block, field, None)
        if value is not None:
            out[key] = int(value)
    return out


def add_usage(total: dict[str, int] | None, usage: dict[str, int] | None) -> dict[str, int] | None:
    """``total + usage`` per key (a key only one side has is kept); ``None`` + ``None`` is ``None``."""
    if usage is None:
        return None if total is None else dict(total)
    out = dict(total or {})
    for key, value in usage.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = out.get(key, 0) + int(value)
    return out


def total_tokens(usage: dict[str, int] | None) -> int | None:
    """Prompt plus completion tokens (reasoning and cached are inside them), or ``None``."""
    if usage is None:
        return None
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def estimate_prompt_tokens(provider_model: str, messages: list[dict[str, Any]] | None, prompt: str | None) -> int:
    """Tokens of a request's prompt by litellm's ``token_counter`` (the model's tokenizer
    where litellm knows it, else tiktoken's cl100k): an estimate, not the provider's count.
    Image parts (``evalkit_image`` facts, :mod:`evalkit.images`) are not given to
    ``token_counter`` (it applies OpenAI's tiles to every model and would fetch a URL): each
    counts :func:`image_tokens` for the provider."""
    litellm = litellm_module()
    with _quiet_litellm():
        if messages is not None:
            text_only, images = _split_images(messages)
            counted = int(litellm.token_counter(model=provider_model, messages=text_only))
            return counted + sum(image_tokens(provider_model, int(f.get("width") or 0), int(f.get("height") or 0)) for f in images)
        return int(litellm.token_counter(model=provider_model, text=prompt or ""))


def _split_images(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(messages without their image parts, the image parts' facts in order)``."""
    if not any(isinstance(m.get("content"), list) for m in messages):
        return messages, []
    out, images = [], []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            kept = []
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("evalkit_image"), dict):
                    images.append(part["evalkit_image"])
                else:
                    kept.append(part)
            m = {**m, "content": kept}
        out.append(m)
    return out, images


def takes_images(provider_model: str, declared: bool | None) -> tuple[bool, str]:
    """Whether a model is sent images, and why: ``declared`` (the config's ``model.vision``)
    when set; else litellm's ``supports_vision``, believed only when it says True (it says
    False for unknown models and for some real vision models — litellm 1.110.2:
    ``claude-3-5-sonnet-20241022``, ``gemini/gemini-1.5-pro``, any ``openai/<custom>`` or
    ``hosted_vllm/*`` —, so False means "not known", not "text-only")."""
    if declared is not None:
        return declared, f"model.vision={str(declared).lower()}"
    litellm = litellm_module()
    try:
        with _quiet_litellm():
            known = bool(litellm.supports_vision(model=provider_model))
    except Exception:  # noqa: BLE001 - an unknown model: not known to take images
        known = False
    return known, "litellm's supports_vision" if known else "model.vision is unset and litellm does not say it takes images"


# ------------------------------------------------------------------------------------------
# image tokens (evalkit's own formulas, one per provider family; each rule's source named)
# ------------------------------------------------------------------------------------------
def image_family(provider_model: str) -> str:
    """``anthropic`` (a Claude model, any route), ``gemini`` (a Gemini model, any route) or
    ``openai`` (everything else: OpenAI's tile rule is the estimate of last resort)."""
    name = provider_model.lower()
    if "claude" in name or name.startswith("anthropic/"):
        return "anthropic"
    if "gemini" in name:
        return "gemini"
    return "openai"


def image_tokens(provider_model: str, width: int, height: int, detail: str = "high") -> int:
    """Prompt tokens one ``width``×``height`` image costs on ``provider_model``:
    :func:`openai_image_tokens`, :func:`anthropic_image_tokens` or :func:`gemini_image_tokens`
    by :func:`image_family`. ``detail``: OpenAI's ``low`` or ``high`` (``auto`` is estimated
    as ``high``, the upper bound)."""
    family = image_family(provider_model)
    if family == "anthropic":
        return anthropic_image_tokens(width, height)
    if family == "gemini":
        return gemini_image_tokens(width, height)
    rule = openai_image_rule(provider_model)
    if rule[0] == "patches":
        return openai_patch_tokens(width, height, rule[1])
    return openai_image_tokens(width, height, detail, base=rule[1], tile=rule[2])


#: OpenAI's documented image rule per model (platform.openai.com, "Images and vision",
#: calculating costs), matched on the model's name (after any ``provider/`` route) by prefix,
#: the longest first: ``("patches", multiplier)`` — 32-px patches, at most 1536, times the
#: model's multiplier — or ``("tiles", base, per tile)`` — 512-px tiles after scaling. A model
#: not listed gets GPT-4o's tiles (85 / 170), the estimate of last resort.
OPENAI_IMAGE_RULES: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("gpt-4.1-mini", ("patches", 1.62)),
    ("gpt-4.1-nano", ("patches", 2.46)),
    ("gpt-5-mini", ("patches", 1.62)),
    ("gpt-5-nano", ("patches", 2.46)),
    ("o4-mini", ("patches", 1.72)),
    ("gpt-4o-mini", ("tiles", 2833, 5667)),
    ("computer-use-preview", ("tiles", 65, 129)),
    ("gpt-5-chat-latest", ("tiles", 70, 140)),
    ("gpt-5", ("tiles", 70, 140)),
    ("gpt-4.5", ("tiles", 85, 170)),
    ("gpt-4.1", ("tiles", 85, 170)),
    ("gpt-4o", ("tiles", 85, 170)),
    ("o1-pro", ("tiles", 75, 150)),
    ("o1", ("tiles", 75, 150)),
    ("o3", ("tiles", 75, 150)),
)
#: the rule of a model OpenAI documents none for: GPT-4o's
OPENAI_DEFAULT_RULE: tuple[Any, ...] = ("tiles", 85, 170)


def openai_image_rule(provider_model: str) -> tuple[Any, ...]:
    """The :data:`OPENAI_IMAGE_RULES` entry of ``provider_model`` (``openai/gpt-4.1-mini-2025-04-14``
    → ``("patches", 1.62)``): the first name that the model's name (after its last ``/``)
    equals or begins with followed by ``-`` (a dated snapshot); :data:`OPENAI_DEFAULT_RULE`
    else (``gpt-5.1``, not documented, included)."""
    name = provider_model.lower().rsplit("/", 1)[-1]
    for prefix, rule in OPENAI_IMAGE_RULES:
        if name == prefix or name.startswith(prefix + "-"):
            return rule
    return OPENAI_DEFAULT_RULE


#: OpenAI's patch rule: patches of 32 px, at most 1536 per image
OPENAI_PATCH, OPENAI_MAX_PATCHES = 32, 1536


def openai_patch_tokens(width: int, height: int, multiplier: float) -> int:
    """OpenAI's patch rule (gpt-4.1-mini and -nano, gpt-5-mini and -nano, o4-mini;
    platform.openai.com, "Images and vision", calculating costs): the 32×32-px patches that
    cover the image; over 1536, the image is first scaled down (aspect kept) to the largest
    size whose whole patches number at most 1536; the patches (at most 1536) times the
    model's multiplier, rounded up (an estimate's upper side). ``detail`` does not apply.
    Documented examples: 1024×1024 → 1024 patches; 1800×2400 → 1056×1408 → 1452 patches."""
    import math

    if width <= 0 or height <= 0:
        return 0
    w, h = float(width), float(height)
    patches = math.ceil(w / OPENAI_PATCH) * math.ceil(h / OPENAI_PATCH)
    if patches > OPENAI_MAX_PATCHES:
        r = math.sqrt(OPENAI_PATCH * OPENAI_PATCH * OPENAI_MAX_PATCHES / (w * h))
        r *= min(math.floor(w * r / OPENAI_PATCH) / (w * r / OPENAI_PATCH), math.floor(h * r / OPENAI_PATCH) / (h * r / OPENAI_PATCH))
        # the scaled sides are whole patches on the side r was fitted to: a float's last bit never adds a patch
        patches = math.ceil(w * r / OPENAI_PATCH - 1e-9) * math.ceil(h * r / OPENAI_PATCH - 1e-9)
    return math.ceil(min(patches, OPENAI_MAX_PATCHES) * multiplier)


def openai_image_tokens(width: int, height: int, detail: str = "high", mini: bool = False,
                        base: int | None = None, tile: int | None = None) -> int:  # fmt: skip
    """OpenAI's tile rule (platform.openai.com, "Images and vision", calculating costs):
    ``low`` detail costs the base alone; ``high`` scales the image to fit 2048×2048, then its
    shorter side to 768 (never up), and costs base + per-tile × the 512-px tiles it covers.
    Base 85 and 170 per tile (GPT-4o, GPT-4.1, GPT-4.5), unless given (``base``, ``tile``:
    :data:`OPENAI_IMAGE_RULES`); ``mini``: gpt-4o-mini's 2833 and 5667. Documented examples:
    1024×1024 high 765, 2048×4096 high 1105, 4096×8192 low 85."""
    if base is None or tile is None:
        base, tile = (2833, 5667) if mini else (85, 170)
    if detail == "low" or width <= 0 or height <= 0:
        return base
    import math

    w, h = float(width), float(height)
    if max(w, h) > 2048:
        f = 2048 / max(w, h)
        w, h = w * f, h * f
    if min(w, h) > 768:
        f = 768 / min(w, h)
        w, h = w * f, h * f
    return base + tile * math.ceil(w / 512) * math.ceil(h / 512)


#: Anthropic's bounds before an image is scaled (docs.anthropic.com, "Vision", evaluate image
#: size): a long edge of at most 1568 px and at most about 1600 tokens (1.2 megapixels)
ANTHROPIC_MAX_EDGE, ANTHROPIC_MAX_TOKENS = 1568, 1600


def anthropic_image_tokens(width: int, height: int) -> int:
    """Anthropic's rule (docs.anthropic.com, "Vision"): tokens = width × height / 750, after
    the image is scaled down, aspect kept, until its long edge is at most 1568 px and it is
    at most about 1600 tokens. Documented examples: 200×200 ≈ 54, 1000×1000 ≈ 1334,
    1092×1092 ≈ 1590 (rounded up here)."""
    import math

    if width <= 0 or height <= 0:
        return 0
    w, h = float(width), float(height)
    f = min(1.0, ANTHROPIC_MAX_EDGE / max(w, h), math.sqrt(ANTHROPIC_MAX_TOKENS * 750 / (w * h)))
    w, h = math.floor(w * f), math.floor(h * f)
    return math.ceil(w * h / 750)


def gemini_image_tokens(width: int, height: int) -> int:
    """Gemini's rule (ai.google.dev, "Understand and count tokens", Gemini 2.0 and later): an
    image with both sides at most 384 px is 258 tokens; a larger one is cut into tiles of a
    crop unit of floor(min(width, height) / 1.5) px, each 258 tokens: ceil(width / unit) ×
    ceil(height / unit) tiles. Documented example: 960×540 → unit 360 → 3 × 2 = 6 tiles
    (1548 tokens)."""
    import math

    if width <= 384 and height <= 384:
        return 258
    unit = max(1, math.floor(min(width, height) / 1.5))
    return 258 * math.ceil(width / unit) * math.ceil(height / unit)


# ------------------------------------------------------------------------------------------
# prices
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Price:
    """What one model's tokens cost, in USD per token.

    ``source``: ``litellm`` (litellm's price map, looked up under ``model``),
    ``model.pricing`` (the model config's ``pricing``, per million tokens there),
    ``offline`` (reference, replay, baselines) or ``embedded`` (evalkit's own llama.cpp
    server) — the last two cost 0 by declaration. ``cached_input_per_token`` ``None``:
    cached prompt tokens cost the input price.
    """

    source: str
    model: str | None = None
    input_per_token: float = 0.0
    output_per_token: float = 0.0
    cached_input_per_token: float | None = None

    @property
    def free(self) -> bool:
        return self.source in ("offline", "embedded")

    def describe(self) -> str:
        """``$2.5/$10 per Mtok (litellm)``: a line's worth of this price."""
        if self.free:
            return f"free ({self.source})"
        cached = "" if self.cached_input_per_token is None else f", cached ${self.cached_input_per_token * 1e6:g}"
        return f"${self.input_per_token * 1e6:g} in / ${self.output_per_token * 1e6:g} out{cached} per Mtok ({self.source})"

    def cost(self, usage: dict[str, int] | None) -> float | None:
        """USD of an answer's ``usage`` (litellm's ``cost_per_token``; our usage follows
        OpenAI's convention — cached tokens inside the prompt tokens — hence the ``openai``
        cost path for a ``model.pricing`` price); ``None`` when the usage is unknown or
        litellm cannot price it (never 0 for an unknown). A free model costs 0."""
        if self.free:
            return 0.0
        if usage is None:
            return None
        litellm = litellm_module()
        from litellm.types.utils import CompletionTokensDetailsWrapper, PromptTokensDetailsWrapper, Usage

        prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        block = Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
            prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=int(usage.get("cached_prompt_tokens", 0))),
            completion_tokens_details=CompletionTokensDetailsWrapper(reasoning_tokens=usage.get("reasoning_tokens")),
        )  # fmt: skip
        kwargs: dict[str, Any] = {"model": self.model or "priced-model", "prompt_tokens": prompt,
                                  "completion_tokens": completion, "usage_object": block}  # fmt: skip
        if self.source != "litellm":
            info = {"input_cost_per_token": self.input_per_token, "output_cost_per_token": self.output_per_token}
            if self.cached_input_per_token is not None:
                info["cache_read_input_token_cost"] = self.cached_input_per_token
            kwargs.update(requested_model_info_override=info, custom_llm_provider="openai")
        try:
            with _quiet_litellm():
                prompt_cost, completion_cost = litellm.cost_per_token(**kwargs)
        except Exception as exc:  # noqa: BLE001 - a cost litellm cannot compute is unknown, never 0
            log.warning("cost of a %s answer unknown: litellm could not price it (%s: %s)", self.model, type(exc).__name__, exc)
            return None
        return float(prompt_cost) + float(completion_cost)


def litellm_price(provider_model: str) -> Price | None:
    """The price litellm's map holds for ``provider_model``, or ``None`` when it has none
    (an unknown model, or one evalkit registered at zero cost itself, see
    :data:`UNPRICED_MARK`)."""
    litellm = litellm_module()
    if (litellm.model_cost.get(provider_model) or {}).get(UNPRICED_MARK):
        return None
    try:
        with _quiet_litellm():
            info = litellm.get_model_info(provider_model)
    except Exception:  # noqa: BLE001 - litellm raises a bare Exception for an unknown model
        return None
    if info.get("input_cost_per_token") is None or info.get("output_cost_per_token") is None:
        return None
    cached = info.get("cache_read_input_token_cost")
    return Price("litellm", provider_model, float(info["input_cost_per_token"]), float(info["output_cost_per_token"]),
                 float(cached) if cached is not None else None)  # fmt: skip


def model_price(model: Any, backend_kind: str, lookup: Callable[[str], Price | None] | None = None) -> Price | None:
    """The price of a model config (``ModelConfig``) reached through a backend of
    ``backend_kind``: offline models and the embedded llama.cpp server are free, a
    ``model.pricing`` wins over litellm's map, and ``None`` means no price is known.
    ``lookup``: how litellm's map is asked (default :func:`litellm_price` in this process;
    a run with model workers asks them, which have litellm imported already)."""
    if model.kind != "litellm":
        return Price("offline")
    if backend_kind == "llamacpp":
        return Price("embedded")
    pricing = getattr(model, "pricing", None)
    if pricing is not None:
        cached = pricing.cached_input_per_mtok
        return Price("model.pricing", model.provider_model, pricing.input_per_mtok / 1e6, pricing.output_per_mtok / 1e6,
                     cached / 1e6 if cached is not None else None)  # fmt: skip
    return (lookup or litellm_price)(model.provider_model)


def batch_price(model: Any, backend_kind: str) -> Price | None:
    """The price of a model config's tokens sent through the provider's batch API:
    ``model.pricing.batch_input_per_mtok`` / ``batch_output_per_mtok`` when set, else
    litellm's ``input_cost_per_token_batches`` / ``output_cost_per_token_batches``; ``None``
    when neither is known (costs are then null, never 0). Cached prompt tokens cost the
    batch input price. Source ``model.pricing.batch`` / ``litellm.batch``."""
    if model.kind != "litellm" or backend_kind == "llamacpp":
        return model_price(model, backend_kind)
    pricing = getattr(model, "pricing", None)
    if pricing is not None and pricing.batch_input_per_mtok is not None and pricing.batch_output_per_mtok is not None:
        return Price("model.pricing.batch", model.provider_model, pricing.batch_input_per_mtok / 1e6,
                     pricing.batch_output_per_mtok / 1e6)  # fmt: skip
    litellm = litellm_module()
    try:
        with _quiet_litellm():
            info = litellm.get_model_info(model.provider_model)
    except Exception:  # noqa: BLE001 - litellm raises a bare Exception for an unknown model
        return None
    cin, cout = info.get("input_cost_per_token_batches"), info.get("output_cost_per_token_batches")
    if cin is None or cout is None:
        return None
    return Price("litellm.batch", model.provider_model, float(cin), float(cout))


# ------------------------------------------------------------------------------------------
# reasoning parameters
# ------------------------------------------------------------------------------------------
def _contains(value: Any, wanted: int) -> bool:
    if isinstance(value, dict):
        return any(_contains(v, wanted) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_contains(v, wanted) for v in value)
    return value == wanted and not isinstance(value, bool)


def reasoning_problem(provider_model: str, sent: dict[str, Any]) -> tuple[str, str] | None:
    """``(parameter, why)`` when ``provider_model`` cannot take a reasoning parameter of
    ``sent`` (litellm keyword arguments: ``reasoning_effort``, ``thinking``), or ``None``
    when it can or litellm cannot tell.

    A parameter outside ``litellm.get_supported_openai_params`` of the model's provider is
    refused (gpt-4o: ``reasoning_effort``; ``openai/*``: ``thinking``); so is a thinking
    budget that litellm's mapping for the provider drops (DeepSeek takes thinking only as
    enabled or disabled: litellm sends it without the budget, with a warning only).
    """
    wanted = [k for k in ("reasoning_effort", "thinking") if sent.get(k) is not None]
    if not wanted:
        return None
    litellm = litellm_module()
    try:
        with _quiet_litellm():
            model, provider, _, _ = litellm.get_llm_provider(provider_model)
            supported = litellm.get_supported_openai_params(model=model, custom_llm_provider=provider) or []
    except Exception:  # noqa: BLE001 - a provider litellm does not know: it cannot tell
        return None
    for key in wanted:
        if key not in supported:
            return key, f"{provider} model {model} does not accept {key} (not among litellm's supported parameters for it)"
    budget = (sent.get("thinking") or {}).get("budget_tokens")
    if budget is None:
        return None
    from litellm.utils import get_optional_params

    try:
        with _quiet_litellm():
            mapped = get_optional_params(model=model, custom_llm_provider=provider, thinking=sent["thinking"])
    except Exception:  # noqa: BLE001 - litellm cannot map it: the provider call would say why
        return None
    if not _contains(mapped, int(budget)):
        return "thinking", f"{provider} model {model} takes no thinking budget (litellm would drop budget_tokens={budget} with a warning only)"
    return None


# ------------------------------------------------------------------------------------------
# sampling parameters
# ------------------------------------------------------------------------------------------
#: OpenAI's reasoning families (``o1``, ``o3-mini``, ``o4-mini``, ``gpt-5*``), whose sampling
#: parameters litellm restricts (temperature 1 only): the last part of a model string
#: starting so is asked of litellm; any other model is not (litellm passes its sampling on)
RESTRICTED_SAMPLING = re.compile(r"^(o\d|gpt-5)")


def sampling_problem(provider_model: str, sent: dict[str, Any]) -> tuple[str, str] | None:
    """``(parameter, why)`` when litellm refuses to send a sampling parameter of ``sent``
    (``temperature``, ``top_p``) to ``provider_model``, as it would on every request
    (``UnsupportedParamsError``: o-series models take temperature 1 only); ``None`` when it
    sends them or cannot tell. litellm is asked (``get_optional_params``, the mapping every
    request goes through) only for the families of :data:`RESTRICTED_SAMPLING`."""
    wanted = {k: sent[k] for k in ("temperature", "top_p") if sent.get(k) is not None}
    if not wanted or not RESTRICTED_SAMPLING.match(provider_model.rsplit("/", 1)[-1]):
        return None
    litellm = litellm_module()
    from litellm.utils import get_optional_params

    try:
        with _quiet_litellm():
            model, provider, _, _ = litellm.get_llm_provider(provider_model)
    except Exception:  # noqa: BLE001 - a provider litellm does not know: it cannot tell
        return None
    context = {"reasoning_effort": sent["reasoning_effort"]} if sent.get("reasoning_effort") is not None else {}
    for key, value in wanted.items():
        try:
            with _quiet_litellm():
                get_optional_params(model=model, custom_llm_provider=provider, **{key: value}, **context)
        except litellm.UnsupportedParamsError as exc:
            reason = str(exc).splitlines()[0].split(" To drop")[0].removeprefix("litellm.UnsupportedParamsError: ")[:200]
            return key, f"{provider} model {model} does not take {key}={value} (litellm: {reason})"
        except Exception:  # noqa: BLE001 - litellm cannot map it: the provider call would say why
            continue
    return None


def structured_output(params: dict[str, Any], form: str | None) -> dict[str, Any]:
    """``params`` with their ``response_format`` (OpenAI's ``{"type": "json_schema",
    "json_schema": {"name", "schema"}}``) in the form the model takes (``model.response_format``):
    unchanged for ``json_schema`` / ``None``; ``{"type": "json_object", "schema": <schema>}``
    for ``json_object`` (llama.cpp's servers, which refuse ``json_schema``)."""
    fmt = params.get("response_format")
    if form != "json_object" or not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return params
    schema = (fmt.get("json_schema") or {}).get("schema")
    return {**params, "response_format": {"type": "json_object", "schema": schema}}
