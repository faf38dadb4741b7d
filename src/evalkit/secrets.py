"""Secret hygiene: API keys never reach logs, records, MLflow or run directories.

Values registered here are replaced by ``***`` in every string evalkit writes; config keys
whose name looks secret (``api_key``, ``token``, ``secret``, ``password``) are redacted.
"""

from __future__ import annotations

import logging
import re
from typing import Any

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
