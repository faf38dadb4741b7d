"""The pytest configuration's warning filters (pyproject.toml): CI's log keeps its durations
table, so only the one known third-party warning is silenced."""

from __future__ import annotations

import warnings

from tests.conftest import REPO_ROOT


def _pytest_filters() -> list[str]:
    import tomllib

    with open(REPO_ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["pytest"]["ini_options"].get("filterwarnings", [])


def test_pydantic_readonly_warning_is_filtered_and_nothing_else():
    """CI's warning summary was hundreds of lines of pydantic's "ReadOnly qualifier"
    UserWarning (litellm's TypedDicts), pushing the durations table out of the log tail. The
    pytest config ignores exactly that message from pydantic's schema builder; another
    UserWarning, or the same text from elsewhere, is still shown."""
    from _pytest.config import parse_warning_filter

    filters = [parse_warning_filter(f, escape=False) for f in _pytest_filters()]
    assert filters, "no filterwarnings in pyproject's pytest config"
    pydantic_msg = ("Item 'x' on TypedDict class 'ChatCompletionToolParam' is using the `ReadOnly` qualifier. "
                    "Pydantic will not protect items from any mutation on dictionary instances.")  # fmt: skip
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        for action, message, category, module, lineno in filters:
            warnings.filterwarnings(action, message, category, module, lineno)
        warnings.warn_explicit(pydantic_msg, UserWarning, "_generate_schema.py", 1, module="pydantic._internal._generate_schema")
        warnings.warn_explicit(pydantic_msg, UserWarning, "other.py", 1, module="evalkit.other")
        warnings.warn_explicit("something else", UserWarning, "_generate_schema.py", 2, module="pydantic._internal._generate_schema")
    assert [str(w.message)[:14] for w in seen] == [pydantic_msg[:14], "something else"]
