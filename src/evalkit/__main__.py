"""``python -m evalkit benchmark=... model=... [key=value ...]`` — the Hydra entry point."""

from __future__ import annotations

import sys

from evalkit.cli import CONF_DIR, compose, hide_secret_overrides, quote_numeric_groups, report_error, run_config
from evalkit.errors import EvalkitError


def _precheck(argv: list[str]) -> None:
    """Compose once with the compose API so that a bad override is one line and exit 2
    (Hydra itself would print a multi-line message and exit 1)."""
    if any(a.startswith("-") for a in argv):
        return  # --help, --cfg, -m ...: Hydra's own handling
    overrides = [a for a in argv if not a.lstrip("+~").startswith("hydra.")]
    compose(overrides)


def main() -> None:
    import logging

    import hydra
    from omegaconf import DictConfig

    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[console])

    sys.argv[1:] = hide_secret_overrides(quote_numeric_groups(sys.argv[1:]))
    try:
        _precheck(sys.argv[1:])
    except EvalkitError as exc:
        sys.exit(report_error(exc))

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
    def _app(cfg: DictConfig) -> None:
        try:
            code = run_config(cfg)
        except EvalkitError as exc:
            code = report_error(exc)
        except KeyboardInterrupt:
            print("evalkit: interrupted; finished samples are journaled — resume with run.resume=<run dir>", file=sys.stderr)
            code = 130
        if code:
            sys.exit(code)

    _app()


if __name__ == "__main__":
    main()
