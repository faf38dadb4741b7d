"""The engine's name for the run journal's one reader, :mod:`evalkit.journal` (which sits
below the engine so that tracking, benchmarks and the commands read the journal by the same
rules). Nothing is defined here."""

from evalkit.journal import (  # noqa: F401 - re-exported
    FAILED,
    MAX_REPEATS,
    PREDICTIONS,
    Journal,
    damaged_journal,
    latest_by_sample,
    read_failures,
    read_journal,
    read_jsonl,
    read_run_journal,
    row_key,
    row_problem,
    unreadable_lines,
)
