"""Secret hygiene: API keys never reach logs, records, MLflow or run directories.

Values registered here are replaced by ``***`` in every string evalkit writes; config keys
whose name looks secret (``api_key``, ``token``, ``secret``, ``password``) are redacted.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from evalkit import errors

REDACTED = "***"
# whole key names (or their last ``_``-part): ``api_key``, ``hf_token``, ``client_secret``;
# not ``max_tokens`` or ``prompt_tokens``
_SECRET_KEY = re.compile(r"^(?:.*[_-])?(?:api_?key|token|secret|password|passwd|authorization|access_key|private_key)$", re.IGNORECASE)
_values: set[str] = set()


def is_secret_key(name: str) -> bool:
    """True for config keys holding credentials (``api_key``, ``hf_token``...); ``*_env``
    keys name a variable and are not secret."""
    return bool(_SECRET_KEY.search(name)) and not name.endswith("_env")


def register(value: str | None) -> None:
    """Remember a secret value (ignored if empty or too short to be a real key)."""
    if value and len(value) >= 6:
        _values.add(value)


def register_url_password(url: str | None) -> None:
    """Register the password of a ``scheme://user:password@host`` URL (e.g. an api_base)."""
    if url:
        from urllib.parse import urlsplit

        try:
            password = urlsplit(url).password
        except ValueError:
            password = None
        register(password)


#: ``key=`` in an override's text, also nested (``judge_overrides=[backend.api_key=…]``) or in
#: an error line quoting one (the key's last part and the sign); its value runs to the first
#: space, comma, quote or closing bracket (:data:`_VALUE_END`)
_ASSIGNMENT = re.compile(r"([A-Za-z0-9_-]+)\s*=\s*")
_VALUE_END = re.compile(r"[\s,'\"\]})]|$")


def _secret_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the value of each ``key=value`` of ``text`` whose key looks secret."""
    spans = []
    for m in _ASSIGNMENT.finditer(text):
        if is_secret_key(m.group(1)):
            end = _VALUE_END.search(text, m.end() + 1 if text[m.end() : m.end() + 1] in ("[", "{", "(") else m.end())
            spans.append((m.end(), end.start() if end else len(text)))
    return spans


def redact_line(text: str, overrides: Any = ()) -> str:
    """``text`` (an override, or an error line that may quote overrides) as it may be shown:
    the value of each ``key=value`` in it whose key looks secret (:func:`is_secret_key`) is
    ``***``, and every registered secret is scrubbed (:func:`scrub`) — the secret values of
    ``overrides`` (the overrides the line is about, ``key=value`` strings) registered first,
    so that a parser's message that quotes a value without its key is scrubbed too."""
    for override in map(str, overrides or ()):
        for start, end in _secret_spans(override):
            register(override[start:end].strip("[{('\""))
    out, last = [], 0
    for start, end in _secret_spans(text):
        if end > start and start >= last:
            out += [text[last:start], REDACTED]
            last = end
    return scrub("".join(out) + text[last:])


def scrub(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    for value in _values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def scrub_obj(obj: Any) -> Any:
    """Deep copy of ``obj`` with secrets scrubbed from strings (cheap when none registered)."""
    if not _values:
        return obj
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {k: scrub_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub_obj(v) for v in obj]
    return obj


def redact_config(obj: Any) -> Any:
    """Config with secret-looking keys blanked (``***``) and registered values scrubbed.
    Keys naming an environment variable (``*_env``) are kept: they are not secrets."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if is_secret_key(str(k)) and v not in (None, ""):
                out[k] = REDACTED
            else:
                out[k] = redact_config(v)
        return out
    if isinstance(obj, list):
        return [redact_config(v) for v in obj]
    if isinstance(obj, str):
        return scrub(obj)
    return obj


class ScrubFilter(logging.Filter):
    """Logging filter that scrubs registered secrets from every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _values:
            record.msg = scrub(record.getMessage())
            record.args = ()
        return True


def register_environment(environ: Any = None) -> None:
    """Register the value of every environment variable whose name looks secret
    (:func:`is_secret_key`: ``OPENAI_API_KEY``, ``HF_TOKEN``, ``MLFLOW_TRACKING_PASSWORD`` …),
    so that it is scrubbed wherever a line or record quotes it, however it got there (a
    config's ``${oc.env:…}``, a parser's message, a server's echo)."""
    for name, value in (os.environ if environ is None else environ).items():
        if is_secret_key(name):
            register(value)


# every process that can print or record a line registers the environment's secrets, and
# every printable() line (evalkit.errors) is scrubbed
register_environment()
if scrub not in errors.line_filters:
    errors.line_filters.append(scrub)
