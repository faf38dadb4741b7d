"""Command-line plumbing shared by ``python -m evalkit`` and the tests.

Every configuration mistake — an unknown key or group option, a wrong type, a broken
override, a missing mandatory value or credential, a missing data directory — ends as one
line ``evalkit: error: <key>: <reason>`` on stderr and exit code 2, before anything runs.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from evalkit.errors import ConfigError, EvalkitError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
log = logging.getLogger("evalkit")


def hydra_error_line(exc: BaseException) -> str:
    """A one-line version of a Hydra/OmegaConf composition error."""
    text = str(exc).strip()
    m = re.search(r"Could not find '([^']+)/([^'/]+)'", text)
    if m:
        group, option = m.groups()
        opts = re.findall(r"^\t(\S+)$", text, flags=re.M)
        avail = f"; available: {', '.join(opts)}" if opts else ""
        return f"{group}={option}: unknown {group}{avail}"
    m = re.search(r"Could not override '([^']+)'", text)
    if m and ("not in struct" in text or "To append" in text):
        return f"{m.group(1)}: unknown key (to add a new key use +{m.group(1)}=...)"
    m = re.search(r"Could not append to config\. An item is already at '([^']+)'", text)
    if m:
        return f"{m.group(1)}: already exists; override it without '+'"
    m = re.search(r"Missing mandatory value: (\S+)", text)
    if m:
        return f"{m.group(1)}: required value missing (pass {m.group(1)}=...)"
    m = re.search(r"Error parsing override '([^']+)'", text)
    if m:
        return f"override {m.group(1)!r} is not valid override syntax (expected key=value)"
    first = text.splitlines()[0] if text else type(exc).__name__
    return first


_NUMERIC_GROUP = re.compile(r"^(shots)=(\d+(?:,\d+)*)$")


def quote_numeric_groups(args: Sequence[str]) -> list[str]:
    """``shots=3`` → ``shots='3'`` and ``shots=0,3`` → ``shots='0','3'``.

    The ``shots`` group's options are named by numbers; Hydra's override grammar would read
    ``3`` as an int and refuse it as a group choice, so the number is quoted for it.
    """
    out = []
    for arg in args:
        m = _NUMERIC_GROUP.match(arg)
        out.append(f"{m.group(1)}=" + ",".join(f"'{n}'" for n in m.group(2).split(",")) if m else arg)
    return out


def hide_secret_overrides(args: Sequence[str], environ: Any = None) -> list[str]:
    """Move secret values given on the command line (``backend.api_key=sk-...``) into
    environment variables and leave an ``${oc.env:...}`` interpolation in their place, so
    that Hydra's own records of the overrides (``multirun.yaml``, sweep configs) never
    hold the value. The value is registered for scrubbing as well."""
    import os

    from evalkit import secrets

    environ = os.environ if environ is None else environ
    out = []
    for i, arg in enumerate(args):
        key, sep, value = arg.partition("=")
        leaf = key.lstrip("+~").rsplit(".", 1)[-1]
        if sep and value and not value.startswith("${") and secrets.is_secret_key(leaf):
            var = f"EVALKIT_SECRET_{i}"
            environ[var] = value
            secrets.register(value)
            out.append(f"{key}=${{oc.env:{var}}}")
        else:
            out.append(arg)
    return out


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose ``conf/config.yaml`` with ``overrides`` (Hydra's compose API).

    Raises:
        ConfigError: any composition error, as one line.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return hydra_compose("config", overrides=quote_numeric_groups(overrides))
    except Exception as exc:  # noqa: BLE001 - hydra raises many types; all become one line
        if type(exc).__name__ == "OverrideParseException":
            raise ConfigError(_bad_override(overrides, exc)) from None
        raise ConfigError(hydra_error_line(exc)) from None


def _bad_override(overrides: Sequence[str], exc: BaseException) -> str:
    """Name the override Hydra's grammar rejected."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for ov in overrides:
        try:
            parser.parse_overrides([ov])
        except Exception as inner:  # noqa: BLE001
            reason = str(inner).splitlines()[0]
            return f"override {ov!r} cannot be parsed ({reason}); expected key=value"
    return str(exc).splitlines()[0]


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    """Resolved plain dict of a composed config without the ``hydra`` node.

    Raises:
        ConfigError: a missing mandatory value (``???``) or a failing interpolation.
    """
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    cfg.pop("hydra", None)
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        if "Missing mandatory value" in str(exc) and key:
            raise ConfigError(f"{key}: required value missing (pass {key}=...)") from None
        raise ConfigError(f"{key or 'config'}: {str(exc).splitlines()[0]}") from None


def _compose_in_context(overrides: list[str]) -> DictConfig:
    """Compose another config of the same tree, inside Hydra's running app if there is one."""
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        from hydra import compose as hydra_compose

        try:
            return hydra_compose("config", overrides=overrides)
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(hydra_error_line(exc)) from None
    return compose(overrides)


def resolve(cfg: DictConfig) -> tuple[dict[str, Any], Any]:
    """Plain resolved dict + validated :class:`~evalkit.config.EvalConfig` of a composed
    config. ``benchmark.user_model=<name>`` is resolved here: ``conf/model/<name>.yaml``
    and its backend become the ``user`` node (logged and pinned like the agent model).

    Raises:
        ConfigError: one line naming the key.
    """
    from evalkit.config import validate

    raw = to_plain(cfg)
    bench_name = (raw.get("benchmark") or {}).get("name")
    per_bench = ((raw.get("model") or {}).get("dataset_args") or {}).get(bench_name) or {}
    user_name = (raw.get("benchmark") or {}).get("user_model") or per_bench.get("user_model")
    if user_name:
        user_overrides = list((raw.get("benchmark") or {}).get("user_overrides") or per_bench.get("user_overrides") or [])
        try:
            user_raw = to_plain(_compose_in_context([f"model={user_name}", *user_overrides]))
        except ConfigError as exc:
            raise ConfigError(f"benchmark.user_model: {exc}") from None
        raw["user"] = {"model": user_raw["model"], "backend": user_raw["backend"]}
    return raw, validate(raw)


def run_config_result(cfg: DictConfig) -> Any:
    """Validate and run one composed config; prints the one-line outcome and returns the
    :class:`~evalkit.engine.run.RunResult`.

    Raises:
        EvalkitError: a configuration, data, run directory or tracking error.
    """
    raw, validated = resolve(cfg)
    from evalkit.engine.run import run_evaluation

    result = run_evaluation(validated, raw)
    s = result.summary
    if s["status"] == "complete":
        head = s["headline"]
        value = s["metrics"].get(head)
        shown = f"{value:.4f}" if isinstance(value, (int, float)) else value
        print(f"evalkit: complete: {s['benchmark']} × {s['model']}: {head} = {shown} ({s['n_scored']} samples) → {result.run_dir}")
    else:
        print(
            f"evalkit: INCOMPLETE: {s['n_failed']} of {s['n_samples']} samples failed "
            f"({', '.join(f'{k}: {v}' for k, v in s['failed_by_kind'].items()) or 'never ran'}); "
            f"no headline score. Resume: run.resume={result.run_dir}",
        )
    return result


def run_config(cfg: DictConfig) -> int:
    """Validate and run one composed config; returns the process exit code.

    0 complete, 1 incomplete (failures recorded in failed.jsonl), 2 configuration or data
    error (nothing was run), 130 interrupted (the journal is kept; resume it).
    """
    return run_config_result(cfg).exit_code


def precheck_sweep(overrides: Sequence[str]) -> int:
    """Compose and validate the points of a sweep (all of a small one; of a large one the
    first point and each distinct value) so that a bad override is one line before any job
    runs. Returns the number of points checked.

    Raises:
        ConfigError: naming the point and the problem.
    """
    from evalkit.sweep import expand_sweep, points_to_check

    try:
        points = expand_sweep(quote_numeric_groups(overrides))
    except Exception as exc:  # noqa: BLE001 - parse errors and unsupported sweep types
        if type(exc).__name__ == "OverrideParseException":
            raise ConfigError(_bad_override(overrides, exc)) from None
        raise ConfigError(hydra_error_line(exc)) from None
    checked = points_to_check(points)
    from evalkit.sweep import point_label, swept_keys

    swept = swept_keys(points)

    def at_point(exc: EvalkitError, point: list[str]) -> EvalkitError:
        label = point_label(point, swept)
        return type(exc)(f"{exc}{f' (sweep point {label})' if label else ''}")

    valid = []
    for point in checked:
        try:
            valid.append((point, resolve(compose(point))[1]))
        except ConfigError as exc:
            raise at_point(exc, point) from None
    # then each distinct tracking store once (this may create it: only once all points are valid)
    from evalkit.tracking.mlflow_tracking import artifact_root, check_tracking, tracking_uri

    stores: set[tuple[str, str, str]] = set()
    for point, validated in valid:
        store = (tracking_uri(validated), validated.tracking.experiment, artifact_root(validated))
        if validated.tracking.kind != "mlflow" or store in stores:
            continue
        stores.add(store)
        try:
            check_tracking(validated)
        except EvalkitError as exc:
            raise at_point(exc, point) from None
    return len(checked)


def report_error(exc: EvalkitError) -> int:
    print(f"evalkit: error: {exc}", file=sys.stderr)
    return exc.exit_code
