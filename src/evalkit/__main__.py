"""``python -m evalkit benchmark=... model=... [key=value ...]`` — the Hydra entry point.

``python -m evalkit -m model=a,b shots=0,3 ...`` is a sweep (Hydra multirun): see
:mod:`evalkit.sweep`.
"""

from __future__ import annotations

import logging
import sys

from evalkit import sweep
from evalkit.cli import hide_secret_overrides, precheck_sweep, report_error, run_config
from evalkit.compose import CONF_DIR, benchmark_keys_addable, compose, quote_numeric_groups, search_path_overrides
from evalkit.errors import ConfigError, EvalkitError, interrupted_line, printable

_MULTIRUN_FLAGS = {"-m", "--multirun"}


class _OneLineFormatter(logging.Formatter):
    """Console lines without tracebacks: those go to the run's ``evalkit.log`` only."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def report_crash(exc: BaseException) -> int:
    """Report an unexpected exception (a bug, not a config or data error) as one line on
    stderr and return exit code 1. The traceback is never printed: it is appended, secrets
    scrubbed, to the run's ``evalkit.log`` when the run had its directory (engine/run.py
    tags the exception with ``evalkit_run_dir``), else to a new ``evalkit-crash-*.log`` in
    the temporary directory; the line names that file."""
    import tempfile
    import time
    import traceback
    from pathlib import Path

    from evalkit import secrets
    from evalkit.errors import first_line

    run_dir = getattr(exc, "evalkit_run_dir", None)
    text = secrets.scrub("".join(traceback.format_exception(exc)))
    entry = f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR evalkit: unexpected error; the run stopped\n{text}"
    if run_dir is not None and Path(run_dir).is_dir():
        where = Path(run_dir) / "evalkit.log"
        with where.open("a", encoding="utf-8") as fh:
            fh.write(entry)
    else:
        with tempfile.NamedTemporaryFile("w", prefix="evalkit-crash-", suffix=".log", delete=False, encoding="utf-8") as fh:
            fh.write(entry)
        where = Path(fh.name)
    what = printable(secrets.scrub(f"{type(exc).__name__}: {first_line(exc, 200)}"))
    print(f"evalkit: error: unexpected error ({what}); the traceback is in {where}", file=sys.stderr)
    return 1


def _precheck(argv: list[str]) -> None:
    """Compose once with the compose API so that a bad override is one line and exit 2
    (Hydra itself would print a multi-line message and exit 1). A sweep (``-m``) has
    every point composed and validated (see :func:`evalkit.cli.precheck_sweep`)."""
    flags = [a for a in argv if a.startswith("-")]
    if any(a not in _MULTIRUN_FLAGS for a in flags):
        return  # --help, --cfg, --info, -c ...: Hydra's own handling
    overrides = [a for a in argv if not a.startswith("-") and not a.lstrip("+~").startswith("hydra.")]
    for a in overrides:
        if a.lstrip("+~").partition("=")[0] == "suite":  # suites/ holds bash/run_suite.sh's lists
            raise ConfigError(
                f"{a}: suites are not a config group; run one with: bash bash/run_suite.sh "
                f"{a.partition('=')[2] or 'SUITE'} --model M (README: Suites)"
            )
    if flags:
        precheck_sweep(overrides)
    else:
        compose(overrides)


def main() -> None:
    import hydra
    from omegaconf import DictConfig

    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)
    console.setFormatter(_OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[console])
    # what is starting (Ray, model workers, llama.cpp's server): `evalkit: <message>` lines on
    # the console (INFO only; warnings keep the format above); they propagate to evalkit.log
    status = logging.StreamHandler(sys.stderr)
    status.addFilter(lambda record: record.levelno < logging.WARNING)
    status.setFormatter(_OneLineFormatter("evalkit: %(message)s"))
    logging.getLogger("evalkit.status").addHandler(status)
    logging.getLogger("evalkit.status").setLevel(logging.INFO)

    sys.argv[1:] = hide_secret_overrides(quote_numeric_groups(sys.argv[1:]))
    try:
        _precheck(sys.argv[1:])
        # for Hydra's own composition, as compose() does: benchmark keys may be added, the user's config dirs
        sys.argv[1:] = benchmark_keys_addable(sys.argv[1:]) + search_path_overrides()
    except EvalkitError as exc:
        sys.exit(report_error(exc))
    except Exception as exc:  # noqa: BLE001 - a bug: one line, the traceback in a log file
        sys.exit(report_crash(exc))

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
    def _app(cfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.get().mode == RunMode.MULTIRUN:
            try:
                sweep.run_job(cfg)  # records its outcome; never stops the sweep's other jobs
            except KeyboardInterrupt as exc:
                print(interrupted_line(exc), file=sys.stderr)
                sys.exit(130)
            return
        try:
            code = run_config(cfg)
        except EvalkitError as exc:
            code = report_error(exc)
        except KeyboardInterrupt as exc:
            print(interrupted_line(exc), file=sys.stderr)
            code = 130
        except Exception as exc:  # noqa: BLE001 - a bug: one line naming the log that holds the traceback
            code = report_crash(exc)
        if code:
            sys.exit(code)

    if not any(a in _MULTIRUN_FLAGS for a in sys.argv[1:]):
        _app()
        return
    try:
        _app()
    except BaseException:  # interrupted, or Hydra gave up: the summary so far, parent run KILLED
        sweep.abort()
        raise
    if sweep.exit_code():
        sys.exit(sweep.exit_code())


if __name__ == "__main__":
    main()
