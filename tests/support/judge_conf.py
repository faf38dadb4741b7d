"""A config directory for judged task runs in tests: the model configs ``judge_a``,
``judge_b`` and ``judge_c`` (litellm ``openai/<name>``, backend ``api``: pointed at the fake
server with ``judge_overrides``) and the task's rows as JSONL."""

from __future__ import annotations

import json
from pathlib import Path

JUDGES = ("judge_a", "judge_b", "judge_c")


def judge_config_dir(tmp_path: Path, rows: list[dict]) -> tuple[Path, Path]:
    """``(conf, data)``: ``tmp_path/conf`` with ``benchmark/`` (empty) and ``model/`` holding
    the judges' configs, and ``tmp_path/rows.jsonl`` holding ``rows``."""
    conf = tmp_path / "conf"
    (conf / "benchmark").mkdir(parents=True)
    (conf / "model").mkdir()
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for name in JUDGES:
        (conf / "model" / f"{name}.yaml").write_text(
            "defaults:\n  - override /backend@_global_.backend: api\n"
            f"name: {name}\nkind: litellm\nprovider_model: openai/{name}\ngeneration: {{temperature: 0.0, max_tokens: 64}}\n",
            encoding="utf-8",
        )
    return conf, data
