"""``python -m evalkit benchmark=... model=... [key=value ...]`` — the Hydra entry point.

``python -m evalkit -m model=a,b shots=0,3 ...`` is a sweep (Hydra multirun): see
:mod:`evalkit.sweep`.
"""

from __future__ import annotations

import contextlib
import io
import sys

from omegaconf import DictConfig

from evalkit import catalog, sweep
from evalkit.cli import console_logging, hide_secret_overrides, precheck_sweep, report_crash, report_error, run_config
from evalkit.compose import (CONF_DIR, CONFIG_DIR_ENV, benchmark_keys_addable, check_config_files, compose, help_additions,
                             help_text, quote_numeric_groups, register_entry_points, search_path_overrides, without_hydra)
from evalkit.errors import ConfigError, EvalkitError, interrupted_line, printable, shell_line

_MULTIRUN_FLAGS = {"-m", "--multirun"}
#: Hydra's flags that would compose another primary config or read configs from elsewhere
#: than evalkit's ``conf/`` and the checked directories of ``EVALKIT_CONFIG_DIR``
#: (``--config-dir``, ``--config-path``, ``--config-name``), or unpickle a file
#: (``--experimental-rerun``): their short forms and their prefixes (argparse takes
#: ``--config-d``, ``--exp``, ``-cdDIR``)
_ELSEWHERE_PREFIXES = ("--config", "--e", "-cd", "-cp", "-cn")


def _precheck(argv: list[str]) -> DictConfig | None:
    """Compose once with the compose API so that a bad override is one line and exit 2
    (Hydra itself would print a multi-line message and exit 1); returns that config, with its
    ``hydra`` node, for a single run that sets nothing of Hydra's (``hydra.*``): the run's own
    (Hydra's main would compose it again: 0.1-0.4 s of start-up, issue 46), else ``None``.
    A sweep (``-m``) has every point composed and validated (see
    :func:`evalkit.cli.precheck_sweep`). With
    Hydra's other flags (``--help``, ``--cfg``, ``--info`` …) the files Hydra would read are
    still checked (:func:`evalkit.compose.check_config_files`: data, not code) before Hydra
    runs; a flag or ``hydra.searchpath`` that would read configs from elsewhere is refused."""
    for a in argv:
        flag = a.partition("=")[0]
        if flag.startswith(_ELSEWHERE_PREFIXES) or a.lstrip("+~").startswith("hydra.searchpath"):
            raise ConfigError(f"{printable(flag, 100)}: evalkit composes its own conf/ and the directories of "
                              f"{CONFIG_DIR_ENV} (checked as data before Hydra reads them); add a config directory "
                              f"there (README: Trust)")  # fmt: skip
    flags = [a for a in argv if a.startswith("-")]
    overrides = [a for a in argv if not a.startswith("-") and not a.lstrip("+~").startswith("hydra.")]
    if any(a not in _MULTIRUN_FLAGS for a in flags):
        check_config_files(overrides)
        return None  # --help, --cfg, --info, -c ...: Hydra's own handling
    for a in overrides:
        if a.lstrip("+~").partition("=")[0] == "suite":  # suites/ holds bash/run_suite.sh's lists
            raise ConfigError(
                f"{a}: suites are not a config group; run one with: "
                f"{shell_line('bash', 'bash/run_suite.sh', a.partition('=')[2] or 'SUITE', '--model', 'M')} (README: Suites)"
            )
    if flags:
        precheck_sweep(overrides)
        return None
    composed = compose(overrides, keep_hydra=True)
    return composed if len(overrides) == len(argv) else None  # a hydra.* override: Hydra's main applies it


def _exit_now(code: int) -> None:
    """End an interrupted run's process at once, once it has closed what it opened and said
    how to resume it: the handlers registered with :mod:`atexit` run (servers stopped, Ray
    disconnected), the streams and logs are flushed, and the interpreter's own finalization
    is skipped. That finalization (garbage collections over the heap litellm and pydantic
    leave, then module teardown) took 1.7-2.6 s on a quiet host and 8-11 s on a loaded one,
    after the lines were printed (measured by dumping the exiting process's stack)."""
    import atexit
    import logging
    import os

    try:
        atexit._run_exitfuncs()
        logging.shutdown()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run_one(cfg: DictConfig) -> None:
    """One run of a composed config (without its ``hydra`` node): its exit code, one line for
    an error, 130 on Ctrl-C once it has said how to resume."""
    try:
        code = run_config(cfg)
    except EvalkitError as exc:
        code = report_error(exc)
    except KeyboardInterrupt as exc:
        print(interrupted_line(exc), file=sys.stderr)
        _exit_now(130)
    except Exception as exc:  # noqa: BLE001 - a bug: one line naming the log that holds the traceback
        code = report_crash(exc)
    if code:
        sys.exit(code)


def _run_composed(composed: DictConfig) -> None:
    """A single run on the config :func:`_precheck` composed, as Hydra's main runs one:
    :class:`~hydra.core.hydra_config.HydraConfig` set from its ``hydra`` node (the choices and
    overrides the run records) with what Hydra's main and ``run_job`` add to it (``mode``,
    ``job.name``, ``runtime.output_dir``: ``${hydra:...}`` in a value resolves as before), and
    the run given a copy without that node inside an initialized Hydra, as in Hydra's app (a
    judge or user simulator is composed in it: :func:`evalkit.compose._compose_in_context`).
    Nothing else of ``run_job`` applies here: ``hydra.run.dir`` is ``.``, ``hydra.output_subdir``
    null, Hydra's logging ``none``, no chdir, and its callbacks are a sweep's."""
    import copy
    import os

    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict, read_write

    with read_write(composed), open_dict(composed):
        composed.hydra.mode = RunMode.RUN
        composed.hydra.job.name = "__main__"  # Hydra's name for `python -m evalkit`
        composed.hydra.runtime.output_dir = os.path.abspath(str(OmegaConf.select(composed, "hydra.run.dir")))
    HydraConfig.instance().set_config(composed)
    with initialize_config_dir(config_dir=str(CONF_DIR), job_name="__main__", version_base=None):
        _run_one(without_hydra(copy.deepcopy(composed)))


def main() -> None:
    if sys.argv[1:2] in (["list"], ["show"]):  # what is there, and its knobs (evalkit.catalog)
        sys.exit(catalog.main(sys.argv[1:]))
    console_logging()

    sys.argv[1:] = hide_secret_overrides(quote_numeric_groups(sys.argv[1:]))
    try:
        register_entry_points()  # benchmark=<entry point> needs no YAML; --help lists them
        composed = _precheck(sys.argv[1:])
        # for Hydra's own composition, as compose() does: benchmark keys may be added, the user's config dirs
        sys.argv[1:] = benchmark_keys_addable(sys.argv[1:]) + search_path_overrides()
    except EvalkitError as exc:
        sys.exit(report_error(exc))
    except Exception as exc:  # noqa: BLE001 - a bug: one line, the traceback in a log file
        sys.exit(report_crash(exc))
    if composed is not None:
        _run_composed(composed)
        return

    import hydra

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
        _run_one(cfg)

    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        hydra_help = io.StringIO()
        try:
            with contextlib.redirect_stdout(hydra_help):
                _app()  # Hydra prints its help and exits
        finally:
            # what EVALKIT_CONFIG_DIR and the entry points add (Hydra lists conf/ only), before Hydra's footer
            sys.stdout.write(help_text(hydra_help.getvalue(), help_additions()))
            sys.stdout.flush()
        return
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
