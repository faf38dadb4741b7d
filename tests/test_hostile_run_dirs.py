"""A run directory, a sample id and a model output are untrusted input (issue 25): side files
named by a digest of (sample id, epoch) and checked on read, no symbolic link followed or
uploaded, ``tracking.json`` checked, text escaped where it is rendered (console, Markdown,
MLflow) and kept exact where it is stored. Quick, in-process tests; the whole-run ones are
in ``test_hostile_runs.py``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from evalkit.engine.journal import read_journal
from evalkit.engine.records import MAX_LINE_BYTES, cap_record, trajectory_of_row, write_transcript
from evalkit.errors import DataError, RunDirError, printable
from evalkit.jsonl import unit_file_name
from evalkit.untrusted import SideFileError, with_side_file
from evalkit.report.markdown import md_code, md_text
from evalkit.tracking.ledger import FILE, Ledger, key_digest, owner_problem, read_file
from evalkit.types import Trajectory

HOSTILE_IDS = ["x/y", "x__y", "a" * 1000, "../../etc/passwd", "nul\0id", "esc\x1b[2J\rid", "..", "/", "\ud800", ""]


def _row(sid: str, output: str, epoch: int = 0) -> dict:
    return {"sample_id": sid, "subset": "s", "status": "ok", "output": output, "scores": {"f1": 1.0}, "epoch": epoch}


def test_unit_file_names_are_injective_bounded_and_plain():
    names = {unit_file_name(sid, epoch) for sid in HOSTILE_IDS for epoch in (0, 1, 7)}
    assert len(names) == 3 * len(HOSTILE_IDS)  # x/y and x__y, and every epoch, apart
    for name in names:
        assert len(name) <= 78 and "/" not in name and "\0" not in name and name.isprintable() and name.isascii()
        assert not name.startswith(".")


def test_colliding_ids_with_large_outputs_keep_their_own_side_files(tmp_path: Path):
    """``x/y`` and ``x__y`` (each over 1 MiB) both went to ``large/x__y.json`` before."""
    big = {sid: f"{sid}:" + sid[0] * (MAX_LINE_BYTES + 10) for sid in ("x/y", "x__y")}
    rows = {sid: cap_record(_row(sid, text), tmp_path) for sid, text in big.items()}
    assert rows["x/y"]["large"]["file"] != rows["x__y"]["large"]["file"]
    for sid, row in rows.items():
        assert len(row["output"]) < len(big[sid]) and trajectory_of_row(row, tmp_path).final_output == big[sid]


@pytest.mark.parametrize("sid", ["a" * 1000, "nul\0id", "esc\x1b[2J\rid", "../../x", "\ud800"])
def test_any_id_gets_a_side_file_and_a_transcript(tmp_path: Path, sid: str):
    """A 300-character id crashed with "File name too long", a NUL with "embedded null byte"."""
    text = "z" * (MAX_LINE_BYTES + 1)
    row = cap_record(_row(sid, text), tmp_path)
    assert with_side_file(row, tmp_path)["output"] == text
    write_transcript(tmp_path, sid, 0, Trajectory(final_output="done"))
    (transcript,) = (tmp_path / "trajectories").iterdir()
    assert json.loads(transcript.read_text())["sample_id"] == sid
    assert {p.parent for p in tmp_path.rglob("*") if p.is_file()} <= {tmp_path / "large", tmp_path / "trajectories"}


def test_repeats_keep_one_side_file_and_one_transcript_per_epoch(tmp_path: Path):
    texts = [f"epoch {e} " + "q" * (MAX_LINE_BYTES + 1) for e in range(3)]
    rows = [cap_record(_row("s1", t, epoch=e), tmp_path) for e, t in enumerate(texts)]
    for e in range(3):
        write_transcript(tmp_path, "s1", e, Trajectory(final_output=f"answer {e}"))
    assert [trajectory_of_row(r, tmp_path).final_output for r in rows] == texts
    shown = sorted(json.loads(p.read_text())["final_output"] for p in (tmp_path / "trajectories").iterdir())
    assert shown == ["answer 0", "answer 1", "answer 2"]


def test_a_side_file_that_is_not_what_its_row_recorded_is_an_error_never_the_capped_text(tmp_path: Path):
    row = cap_record(_row("s", "w" * (MAX_LINE_BYTES + 1)), tmp_path)
    path = tmp_path / row["large"]["file"]
    data = path.read_bytes()
    path.write_bytes(data.replace(b"w", b"v", 1))  # same size, other bytes
    with pytest.raises(SideFileError, match="sha256"):
        with_side_file(row, tmp_path)
    path.unlink()
    with pytest.raises(SideFileError, match="does not exist; not read"):
        trajectory_of_row(row, tmp_path)


def test_a_side_file_is_never_read_through_a_link_nor_outside_the_run(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    row = cap_record(_row("s", "w" * (MAX_LINE_BYTES + 1)), run)
    outside = tmp_path / "secret.json"
    os.replace(run / row["large"]["file"], outside)
    (run / row["large"]["file"]).symlink_to(outside)  # the very bytes recorded, behind a link
    with pytest.raises(SideFileError, match="symbolic link"):
        with_side_file(row, run)
    with pytest.raises(SideFileError):
        with_side_file({**row, "large": {**row["large"], "file": "../secret.json"}}, run)


def test_side_files_and_transcripts_are_never_written_through_a_planted_link(tmp_path: Path):
    run, victim = tmp_path / "run", tmp_path / "victim.txt"
    (run / "large").mkdir(parents=True)
    victim.write_text("keep me")
    (run / "large" / unit_file_name("s", 0)).symlink_to(victim)
    with pytest.raises(SideFileError, match="symbolic link"):
        cap_record(_row("s", "w" * (MAX_LINE_BYTES + 1)), run)
    (run / "trajectories").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(SideFileError, match="symbolic link"):
        write_transcript(run, "s", 0, Trajectory(final_output="x"))
    assert victim.read_text() == "keep me" and not (tmp_path / unit_file_name("s", 0)).exists()


def test_uploads_skip_every_link_in_a_run_directory(tmp_path: Path, caplog):
    from evalkit.tracking.mlflow_tracking import run_files

    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / "large").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("s3cret")
    for name in ("summary.json", "predictions.jsonl", "large/a.json", FILE, ".hidden"):
        (run / name).write_text("{}")
    (run / "hostname").symlink_to("/etc/hostname")
    (run / "key.txt").symlink_to(outside / "secret.txt")
    (run / "folder").symlink_to(outside, target_is_directory=True)
    (run / "large" / "b.json").symlink_to(outside / "secret.txt")
    files = [(p.relative_to(run).as_posix(), folder) for p, folder in run_files(run)]
    assert files == [("predictions.jsonl", None), ("summary.json", None), ("large/a.json", "large")]
    assert sum("symbolic link, not uploaded" in r.message for r in caplog.records) == 4


def _ledger_file(run: Path, **fields) -> Path:
    state = {"mlflow_run_id": "a" * 32, "tracking_uri": "sqlite:///x.db", "experiment_id": "1", "summary_sha256": None,
             "run_key": "b" * 32, "traces": {}, **fields}  # fmt: skip
    run.mkdir(exist_ok=True)
    (run / FILE).write_text(json.dumps(state))
    return run / FILE


@pytest.mark.parametrize("fields, where", [
    ({"mlflow_run_id": "../../x"}, "mlflow_run_id"), ({"traces": {"s": "not-a-trace"}}, "traces"),
    ({"tracking_uri": 5}, "tracking_uri"), ({"experiment_id": "1" * 65}, "experiment_id"),
    ({"run_key": "B" * 32}, "run_key"), ({"extra": 1}, "extra"), ({"traces": [1]}, "traces"),
])  # fmt: skip
def test_a_tracking_json_breaking_its_schema_is_one_line(tmp_path: Path, fields: dict, where: str):
    path = _ledger_file(tmp_path / "run", **fields)
    with pytest.raises(RunDirError, match=f"tracking.json: {where}") as info:
        Ledger.load(path.parent, "sqlite:///x.db")
    assert "\n" not in str(info.value)


def test_a_tracking_json_link_or_non_json_is_refused(tmp_path: Path):
    real = _ledger_file(tmp_path / "elsewhere")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / FILE).symlink_to(real)
    with pytest.raises(RunDirError, match="symbolic link"):
        read_file(tmp_path / "run" / FILE)
    (tmp_path / "run" / FILE).unlink()
    (tmp_path / "run" / FILE).write_text("{not json")
    with pytest.raises(RunDirError, match="not JSON"):
        read_file(tmp_path / "run" / FILE)


def test_an_mlflow_run_belongs_to_a_directory_by_its_key_or_its_run_dir_tag(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    _ledger_file(a, run_key="1" * 32)
    _ledger_file(b, run_key="2" * 32)
    mine = Ledger.load(a, "sqlite:///x.db")
    of_b = {"run_dir": str(b.resolve()), "evalkit.run_key_sha256": key_digest("2" * 32)}
    assert "not this directory's" in owner_problem(a, mine, of_b)  # the takeover: another run's id
    assert "run_dir tag names" in owner_problem(a, mine, {"run_dir": str(b.resolve())})  # an old run without a key
    assert owner_problem(a, mine, {"run_dir": str(a.resolve())}) is None
    own = {"run_dir": str(tmp_path / "moved-away"), "evalkit.run_key_sha256": key_digest("1" * 32)}
    assert owner_problem(a, mine, own) is None  # the directory was moved: its key still matches
    copy_of_b = Ledger.load(b, "sqlite:///x.db")
    copy_of_b.run_key = "2" * 32
    assert "is a copy of" in owner_problem(tmp_path / "b-copy", copy_of_b, of_b)  # b still holds the run


def test_printable_escapes_control_and_format_characters_and_keeps_text():
    assert printable("en/normal_atom_bool_0 é 中") == "en/normal_atom_bool_0 é 中"
    assert printable("a\x1b[31mb\r\nc\x00\u202e\ud800\x9b") == "a\\x1b[31mb\\x0d\\x0ac\\x00\\u202e\\ud800\\x9b"
    assert printable("x" * 10, limit=3) == "xxx…"


def test_the_journal_warning_and_the_replay_error_print_ids_escaped(tmp_path: Path):
    from evalkit.models.offline import load_replay_file

    sid = "evil\x1b]0;owned\x07\x1b[2J"
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(json.dumps(_row(sid, "a") | {"scores": {"f1": s}}) for s in (1.0, 0.0)) + "\n")
    line = read_journal(path).problems()
    assert "journaled twice" in line and "\x1b" not in line and "\x07" not in line and "evil\\x1b]0;owned" in line
    path.write_text("\n".join(json.dumps({"sample_id": sid, "output": o}) for o in ("a", "b")) + "\n")
    with pytest.raises(DataError, match="appears twice") as info:
        load_replay_file(path)
    assert "\x1b" not in str(info.value) and "evil\\x1b" in str(info.value)


def test_a_replayed_row_whose_side_file_fails_its_check_is_not_replayed(tmp_path: Path, caplog):
    from evalkit.models.offline import load_replay_file

    rows = [cap_record(_row(sid, sid * (MAX_LINE_BYTES + 1)), tmp_path) for sid in ("p", "q")]
    (tmp_path / rows[0]["large"]["file"]).write_bytes(b"{}")
    (tmp_path / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    outputs = load_replay_file(tmp_path / "predictions.jsonl")
    # journal rows name their epoch: the table is keyed by (sample id, epoch) (issue 49's repeats)
    assert list(outputs) == [("q", 0)] and outputs[("q", 0)] == "q" * (MAX_LINE_BYTES + 1)
    assert any("does not match" in r.message and "not replayed" in r.message for r in caplog.records)


def test_compare_flips_table_prints_ids_escaped():
    from evalkit.compare import render

    run = {"dir": "r", "benchmark": "ke", "model": "m", "status": "complete", "n_failed": 0, "n_scored": 1, "n_samples": 1,
           "data_fingerprint": "f", "headline": "f1"}  # fmt: skip
    entry = {"sample_id": "id\x1b[2J", "subset": "s\r", "a": 1.0, "b": 0.0}
    pair = {"score": "f1", "n_common": 1, "only_in_a": [], "only_in_b": [], "a_better": [entry], "b_better": []}
    text = render({"runs": [run, run], "metrics": [], "paired": [], "flips": [pair]})
    assert "id\\x1b[2J" in text and "s\\x0d" in text and "\x1b" not in text and "\r" not in text


def test_markdown_fields_from_data_start_nothing():
    hostile = "x](http://h/a) ![i](http://h/i.png) <img src=http://h/j> | `c` \x1b[2J\r\n# heading \\"
    text = md_text(hostile)
    unescaped = [m.group() for m in re.finditer(r"(?<!\\)(?:!\[|\]\(|<|\||`)", text)]
    assert unescaped == [] and "\x1b" not in text and "\r" not in text and "\n" not in text
    assert md_text("en/normal_atom_bool_0 0.5 [0.4, 0.6] (n=3)") == "en/normal_atom_bool_0 0.5 [0.4, 0.6] (n=3)"
    assert md_code("a``b") == "```a``b```" and md_code("`x") == "`` `x ``"


def test_report_md_escapes_the_ids_of_the_scoring_limit_list():
    from evalkit.report.summary import _limited

    text = "\n".join(_limited(["ok_id", "x`\n# Injected\n![p](http://h/p.png)", "cr\rid"]))
    assert "`ok_id`" in text and "\n# Injected" not in text and "\r" not in text
    assert "``x`\\x0a# Injected\\x0a![p](http://h/p.png)``" in text  # inside a code span nothing renders


def test_sweep_report_cells_escape_cr_esc_and_markdown():
    from evalkit.sweep import report_markdown

    job = {"num": 0, "point": ["model=a"], "overrides": [], "status": "error", "headline": None, "headline_value": None,
           "error": "boom\r\x1b[2J ![x](http://h/x.png) | y", "run_dir": None}  # fmt: skip
    text = report_markdown({"sweep_id": "s", "n_complete_jobs": 0, "n_jobs": 1, "overrides": ["model=a"], "jobs": [job]})
    assert "\r" not in text and "\x1b" not in text and not re.search(r"(?<!\\)!\[", text)
    assert "| boom\\\\x0d\\\\x1b[2J \\![x\\](http://h/x.png) \\| y |" in text


def test_mlflow_text_escapes_lone_surrogates_and_images_only_in_the_copy():
    from evalkit.tracking.traces import mlflow_obj, mlflow_text

    text = "ok \ud800 ![x](http://h/x.png)\x00"
    shown = mlflow_text(text)
    assert shown == "ok \\ud800 !\\[x](http://h/x.png)\\u0000"
    shown.encode("utf-8")  # the store's encoder takes it
    assert mlflow_obj({"k\ud800": [text]}) == {"k\\ud800": [shown]} and text == "ok \ud800 ![x](http://h/x.png)\x00"


def test_a_one_line_error_prints_the_data_in_it_escaped(capsys):
    from evalkit.cli import report_error

    assert report_error(DataError("data.jsonl:3: unknown sample id \x1b[2Jx\r")) == 2
    err = capsys.readouterr().err
    assert err == "evalkit: error: data.jsonl:3: unknown sample id \\x1b[2Jx\\x0d\n"


def test_a_run_directory_holding_a_link_is_not_resumed(tmp_path: Path, acebench_dir: Path):
    """Before: a link planted as config.yaml, evalkit.log or predictions.jsonl was written
    through by the resumed run (config.yaml is rewritten on every resume)."""
    from evalkit.compose import compose, resolve
    from evalkit.engine.rundir import choose_run_dir
    from evalkit.specs import build
    from tests.conftest import base_overrides

    run, victim = tmp_path / "run", tmp_path / "victim.txt"
    (run / "trajectories").mkdir(parents=True)
    victim.write_text("keep me")
    (run / "config.yaml").write_text("{}\n")
    (run / "trajectories" / "evalkit.log").symlink_to(victim)
    _, cfg = resolve(compose(base_overrides(tmp_path / "out", acebench_dir) + ["model=reference", f"run.resume={run}"]))
    with pytest.raises(RunDirError, match="evalkit.log is a symbolic link"):
        choose_run_dir(build(cfg).run_dir)
    assert victim.read_text() == "keep me"


def _sweep_job(tmp_path: Path) -> tuple[Path, dict]:
    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "0").mkdir(parents=True)
    return sweep_dir / "0", {"sweep_dir": str(sweep_dir)}


def test_track_reads_a_sweeps_sweep_json_as_a_bounded_record(tmp_path: Path):
    """``evalkit.track`` reads a job's ``sweep.json`` (ids, overrides, one point per job: kilobytes)
    only as a regular file of at most MAX_SWEEP_BYTES, no link followed: a crafted one is one
    line (exit 2), not 256 MiB read into memory, a link followed or a FIFO waited on."""
    from evalkit.track import MAX_SWEEP_BYTES, _sweep_of

    job, run = _sweep_job(tmp_path)
    path = job.parent / "sweep.json"
    assert _sweep_of(job, run) is None  # a sweep directory without its sweep.json: logged without a parent run
    path.write_text(json.dumps({"sweep_id": "s1", "parent_run_id": "p" * 32}))
    assert _sweep_of(job, run) == {"sweep_id": "s1", "parent_run_id": "p" * 32}
    assert MAX_SWEEP_BYTES <= 32 << 20
    with open(path, "r+b") as fh:
        fh.truncate(MAX_SWEEP_BYTES + 1)  # sparse: over the bound without writing it
    with pytest.raises(RunDirError, match=f"sweep.json: {MAX_SWEEP_BYTES + 1:,} bytes, over the {MAX_SWEEP_BYTES:,} allowed for a sweep.json; not read") as info:
        _sweep_of(job, run)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    path.unlink()
    (tmp_path / "elsewhere.json").write_text("{}")
    path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(RunDirError, match="sweep.json: a symbolic link, never followed here; not read"):
        _sweep_of(job, run)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(RunDirError, match="sweep.json: a FIFO, not a regular file; not read"):
        _sweep_of(job, run)
    path.unlink()
    path.write_text("[1, 2]")
    with pytest.raises(RunDirError, match="sweep.json: not a JSON object"):
        _sweep_of(job, run)


def _refused_without_waiting(read, *args) -> str:
    """``read(*args)``'s one-line refusal, asserted to come while nobody writes the FIFO (the
    read runs in a thread: before the fix it waited for a writer for ever)."""
    import threading

    out: list = []

    def target():
        try:
            out.append(("returned", read(*args)))
        except Exception as exc:  # noqa: BLE001 - what it raised is the result
            out.append(("raised", exc))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f"{read.__name__} waited on a FIFO"
    (kind, value), = out
    assert kind == "raised" and isinstance(value, RunDirError), (kind, value)
    return str(value)


def test_no_run_directory_reader_waits_on_a_planted_fifo(tmp_path: Path):
    """``config.yaml``, ``tracking.json`` and ``predictions.jsonl`` replaced by FIFOs (the
    readers ``track``, ``judge`` and ``rescore`` use): each is refused at once, naming what it
    is, where opening it used to wait for a writer that never comes."""
    from evalkit.untrusted import iter_tolerant, read_run_yaml
    from evalkit.summary import read_summary_record

    for name in ("config.yaml", "tracking.json", "predictions.jsonl", "summary.json"):
        os.mkfifo(tmp_path / name)
    assert "a FIFO, not a regular file; not read" in _refused_without_waiting(read_run_yaml, tmp_path / "config.yaml")
    assert "a FIFO, not a regular file; not read" in _refused_without_waiting(read_file, tmp_path / FILE)
    assert "a FIFO, not a regular file; not read" in _refused_without_waiting(iter_tolerant, tmp_path / "predictions.jsonl")
    assert "a FIFO, not a regular file; not read" in _refused_without_waiting(read_summary_record, tmp_path / "summary.json")
    (tmp_path / "sub").mkdir()
    os.rename(tmp_path / "sub", tmp_path / "d.yaml")
    assert "a directory, not a regular file; not read" in _refused_without_waiting(read_run_yaml, tmp_path / "d.yaml")
