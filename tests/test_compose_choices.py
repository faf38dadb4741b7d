"""Options chosen through a chosen config's own ``defaults`` list (``conf/model/reference.yaml``
picks ``backend: offline``) get the checks of options chosen on the command line or by
``conf/config.yaml``: an option defined both in ``conf/`` and in EVALKIT_CONFIG_DIR is refused
naming both files, and a file that is not a regular file (or over a bound) is named with why,
before Hydra reads it. The run's choices are Hydra's (``hydra.runtime.choices``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MODEL_PICKING = "defaults:\n  - override /backend@_global_.backend: {backend}\nname: {name}\nkind: reference\n"


def _config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for group in ("backend", "model"):
        (tmp_path / group).mkdir(exist_ok=True)
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path))
    return tmp_path


def test_a_config_dir_option_chosen_by_a_shipped_configs_defaults_is_refused_naming_both_files(tmp_path, monkeypatch):
    """``model=reference`` picks ``backend: offline`` in its own defaults; a team's
    ``backend/offline.yaml`` was silently hidden by the shipped one."""
    from evalkit.compose import CONF_DIR, compose
    from evalkit.errors import ConfigError

    cd = _config_dir(tmp_path, monkeypatch)
    (cd / "backend" / "offline.yaml").write_text("kind: offline\nconcurrency: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        compose(["benchmark=mc_mini", "model=reference"])
    assert str(err.value).startswith(f"backend=offline: defined twice, in {CONF_DIR / 'backend' / 'offline.yaml'} "
                                      f"and in {cd / 'backend' / 'offline.yaml'}")  # fmt: skip


def test_a_shipped_default_that_a_chosen_configs_defaults_replace_is_no_conflict(tmp_path, monkeypatch):
    """``conf/config.yaml`` defaults to ``backend: api``; ``model=reference`` replaces it with
    ``offline``: a team's ``backend/api.yaml`` is not chosen, so not refused (it was, the
    choices being read from ``conf/config.yaml`` alone)."""
    from evalkit.compose import compose

    cd = _config_dir(tmp_path, monkeypatch)
    (cd / "backend" / "api.yaml").write_text("kind: api\n", encoding="utf-8")
    assert compose(["benchmark=mc_mini", "model=reference"]).backend.kind == "offline"


def test_a_config_dir_backend_picked_by_a_config_dir_model_is_used(tmp_path, monkeypatch):
    from evalkit.compose import compose

    cd = _config_dir(tmp_path, monkeypatch)
    (cd / "model" / "mine.yaml").write_text(MODEL_PICKING.format(backend="slow", name="mine"), encoding="utf-8")
    (cd / "backend" / "slow.yaml").write_text("kind: offline\nconcurrency: 3\n", encoding="utf-8")
    cfg = compose(["benchmark=mc_mini", "model=mine"])
    assert (cfg.model.name, cfg.backend.concurrency) == ("mine", 3)


@pytest.mark.parametrize(("kind", "why"), [
    ("fifo", "not a regular file (a FIFO)"),
    ("link to /dev/zero", "not a regular file (a symbolic link to /dev/zero, a character device)"),
    ("huge", "314,572,800 bytes, over the 1,048,576 a YAML file may have"),
])  # fmt: skip
def test_a_config_dir_backend_picked_by_a_models_defaults_is_named_with_why(tmp_path, monkeypatch, kind, why):
    """A config-dir model whose defaults pick a config-dir backend that is a FIFO or a link
    to /dev/zero said "backend=fifob: unknown backend; available: …"; a huge one was read
    by Hydra. Now one line names the file and why, before Hydra reads it."""
    from evalkit.compose import compose
    from evalkit.errors import ConfigError

    cd = _config_dir(tmp_path, monkeypatch)
    (cd / "model" / "picky.yaml").write_text(MODEL_PICKING.format(backend="fifob", name="picky"), encoding="utf-8")
    path = cd / "backend" / "fifob.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with open(path, "wb") as fh:
            fh.truncate(300 * 1024 * 1024)  # sparse: no disk used
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(ConfigError) as err:
        compose(["benchmark=mc_mini", "model=picky"])
    assert str(err.value).startswith(f"{path}: {why}") and "unknown" not in str(err.value)


def test_defaults_named_reads_every_entry_form(tmp_path):
    """Hydra's defaults entries: ``override``/``optional`` keywords, absolute and relative
    groups, packages, lists, plain names; ``_self_``, ``null`` and Hydra's own groups left out."""
    from evalkit.compose import defaults_named

    path = tmp_path / "x.yaml"
    path.write_text("defaults:\n  - override /backend@_global_.backend: offline\n  - optional sub@p: a\n"
                    "  - /shots: [\"0\", \"3\"]\n  - base\n  - _self_\n  - tracking: null\n"
                    "  - override hydra/job_logging: none\n", encoding="utf-8")  # fmt: skip
    assert defaults_named(path, "model") == [("backend", "offline"), ("model/sub", "a"), ("shots", "0"), ("shots", "3"),
                                             ("model", "base")]  # fmt: skip
