"""Session-wide fixtures: paths to the shared test data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("EVALKIT_SHARED_DIR", REPO_ROOT.parent / "shared")).resolve()


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """``../shared/data`` (read-only test data; never copied into the project)."""
    path = SHARED_DIR / "data"
    if not path.is_dir():
        pytest.fail(f"shared test data not found at {path}; set EVALKIT_SHARED_DIR")
    return path


@pytest.fixture(scope="session")
def acebench_dir(shared_data_dir: Path) -> Path:
    """The official ACEBench data (``data_all/``) with ``prompts.json`` beside it."""
    return shared_data_dir / "acebench"
