"""Simulated APIs of the agent categories and the per-rollout environment (spec §5.1, §5.6)."""

from __future__ import annotations

import copy
import inspect
import json
from typing import Any

from evalkit.benchmarks.acebench.agent.envs.phone import BaseApi, FoodPlatform, MessageApi, ReminderApi, ReminderApiZh
from evalkit.benchmarks.acebench.agent.envs.seed import SeedTexts, extract_seed, load_seed
from evalkit.benchmarks.acebench.agent.envs.travel import Travel

#: class name -> (en class, zh class)
CLASSES: dict[str, tuple[type, type]] = {
    "BaseApi": (BaseApi, BaseApi),
    "MessageApi": (MessageApi, MessageApi),
    "ReminderApi": (ReminderApi, ReminderApiZh),
    "FoodPlatform": (FoodPlatform, FoodPlatform),
    "Travel": (Travel, Travel),
}

#: graded attributes per class (spec §4.4), in snapshot order
GRADED: dict[str, tuple[str, ...]] = {name: cls[0].graded for name, cls in CLASSES.items()}
GRADED["BaseApi"] = BaseApi.graded


def public_methods(instance: Any) -> set[str]:
    """Names of the public (not ``_``-prefixed) bound methods, inherited ones included."""
    return {
        name
        for name in dir(instance)
        if not name.startswith("_") and inspect.ismethod(getattr(instance, name, None))
    }


class Environment:
    """The simulator instances of one rollout, in ``involved_classes`` order.

    Built fresh from the record: each instance loads ``initial_config[<class>]`` and then
    ``initial_config["BaseApi"]`` (deep copies; spec §5.1). Nothing is shared between
    environments.
    """

    def __init__(self, language: str, involved_classes: list[str], initial_config: dict[str, Any], seed: SeedTexts):
        self.language = language
        self.instances: list[tuple[str, Any]] = []
        config = initial_config if isinstance(initial_config, dict) else {}
        for name in involved_classes:
            if name not in CLASSES:
                raise ValueError(f"unknown ACEBench simulator class {name!r}")
            cls = CLASSES[name][1 if language == "zh" else 0]
            instance = cls(language, seed)
            for cfg in (config.get(name, {}), config.get("BaseApi", {})):
                instance._load(copy.deepcopy(cfg) if isinstance(cfg, dict) else {})
            self.instances.append((name, instance))
        self._methods = [(name, inst, public_methods(inst)) for name, inst in self.instances]

    def targets(self, method: str) -> list[Any]:
        """Every instance having public method ``method``, in involved order (spec §5.2)."""
        return [getattr(inst, method) for _, inst, methods in self._methods if method in methods]

    def knows(self, method: str) -> bool:
        return any(method in methods for _, _, methods in self._methods)

    def snapshot(self) -> list[dict[str, dict[str, Any]]]:
        """Graded attributes per instance, JSON round-tripped (int keys become strings)."""
        out = []
        for name, inst in self.instances:
            attrs = {attr: getattr(inst, attr) for attr in GRADED[name] if hasattr(inst, attr)}
            out.append({name: json_round_trip(attrs)})
        return out


def json_round_trip(value: Any) -> Any:
    """``json.loads(json.dumps(value))``; values JSON cannot hold become their ``str``."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):  # e.g. a tuple used as a dict key
        return json.loads(json.dumps(_plain(value), ensure_ascii=False, default=str))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int, float, bool)) or k is None else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


__all__ = ["CLASSES", "GRADED", "Environment", "SeedTexts", "extract_seed", "json_round_trip", "load_seed", "public_methods"]
