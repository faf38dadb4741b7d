"""Commands evalkit prints or records for a user to paste (issue 43 item 5): one shell line
that splits back into exactly the words meant (``shlex.join``), and a ``run.resume=`` word
that Hydra's override grammar reads back as the very directory, whatever its name holds."""

from __future__ import annotations

import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from evalkit.errors import interrupted_line, resume_arg, shell_line

NAMES = ["runs/x", "runs/x;touch PWNED;y", "runs/x $(touch PWN);`id` q", "it's", "c:\\dir\\", "a b", "outputs/runs/ace/ref/2026-12-07"]


@pytest.mark.parametrize("name", NAMES)
def test_a_resume_word_is_one_shell_word_hydra_reads_as_the_directory(name):
    (word,) = shlex.split(resume_arg(name))
    override = OverridesParser.create().parse_override(word)
    assert (override.key_or_group, override.value()) == ("run.resume", name)


@pytest.mark.parametrize("name", NAMES)
def test_a_printed_command_splits_back_into_its_words(name):
    words = ["python", "-m", "evalkit.compare", name, f"{name}/rescored"]
    assert shlex.split(shell_line(*words)) == words


def test_the_interrupted_line_quotes_its_resume_word():
    class Stopped(Exception):
        run_dir = "runs/x;touch PWNED;y"

    line = interrupted_line(Stopped())
    head = "evalkit: interrupted; finished samples are journaled — resume with "
    assert line.startswith(head)
    (word,) = shlex.split(line[len(head):])  # one shell word, nothing after it runs
    assert OverridesParser.create().parse_override(word).value() == "runs/x;touch PWNED;y"
