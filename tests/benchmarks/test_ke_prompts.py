"""KE prompt (spec §3): the template is the spec's text byte for byte; rendering is byte-exact
in chat and completion modes, 0 and 3 shots, with truncation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalkit.benchmarks.ke import KE, KESettings
from evalkit.benchmarks.ke.prompts import ANSWER_PREFIX, TEMPLATE_FILE, load_template
from evalkit.types import sha256_hex
from tests.conftest import SHARED_DIR

SPEC = SHARED_DIR / "design" / "ke_spec.md"


@pytest.fixture(scope="module")
def bench(shared_data_dir: Path) -> KE:
    d = shared_data_dir / "ke"
    return KE(KESettings(pilot_path=d / "pilot.jsonl", icl_path=d / "icl_examples.jsonl"))


@pytest.fixture(scope="module")
def samples(bench: KE) -> dict:
    return {s.id: s for s in bench.load()}


def spec_template() -> str:
    text = SPEC.read_text(encoding="utf-8")
    return re.search(r"### 3\.1.*?```text\n(.*?)\n```", text, re.S).group(1)


def test_template_file_is_the_spec_text_byte_for_byte() -> None:
    spec = spec_template()
    assert TEMPLATE_FILE.read_bytes() == spec.encode("utf-8")
    assert sha256_hex(TEMPLATE_FILE.read_bytes()) == sha256_hex(spec)
    assert load_template().sha256 == "ccccd1c317c065b61093fbc5872a342712d88e4ac65c6a903940c1612bb2baac"


def independent_prompt(sample: dict, examples: list[dict] = ()) -> str:
    """§3.2/§3.4 rendered straight from the spec's wording (no evalkit prompt code)."""
    spec = spec_template()
    intro = spec[: spec.index("Task: {code_traj.user_task}")]

    def body(steps: list[dict], t: int, o: int) -> str:
        return "\n\n".join(
            "[" + s["step_id"] + "]\n  Thought: " + s["thought"][:t] + "\n  Observation Type: " + s["obs_type"]
            + "\n  Observation: " + s["observation"][:o]
            for s in steps
        )  # fmt: skip

    shots = "".join(
        "Task: " + ex["user_task"] + "\n\nTrajectory Steps:\n\n" + body(ex["trajectory_steps"], 200, 300)
        + "\n\nThe critical steps are: " + ", ".join(ex["gold_step_ids"]) + "\n\n"
        for ex in examples
    )  # fmt: skip
    tail = "\n\nNow identify which steps provided critical information:\n\nThe critical steps are:\n- step_"
    return intro + shots + "Task: " + sample["user_task"] + "\n\nTrajectory Steps:\n\n" + body(sample["trajectory_steps"], 400, 800) + tail


def test_spec_test_vector(bench: KE, samples: dict) -> None:
    prompt = bench.build(samples["code_ke_834b34a9"], 0).messages[0]["content"]
    assert len(prompt) == 3559
    assert sha256_hex(prompt) == "ddb3eaa9658300654dc1078d3fd0a1f63d4dfbff434726113bdc39d869548f22"


#: (sample, shots) -> (characters, UTF-8 SHA-256); 834b34a9 0-shot is the spec's vector;
#: a0e6c3f5 (Chinese thought > 400, observations > 2,000) and 47ac0e2d (English thought > 400,
#: gold facts past character 800) exercise truncation; 3-shot exercises ICL truncation.
DIGESTS = {
    ("code_ke_834b34a9", 0): (3559, "ddb3eaa9658300654dc1078d3fd0a1f63d4dfbff434726113bdc39d869548f22"),
    ("code_ke_834b34a9", 3): (14034, "5f1c434133910e9fa92bcbf92d383ae6d23737631a28283541acc847dc5519fd"),
    ("code_ke_a0e6c3f5", 0): (9539, "cb9c63e60a923558ebf49810f03c9cc0ff06646e403153eff0cbe51ecc4ca0ab"),
    ("code_ke_a0e6c3f5", 3): (20014, "c23e3674ba616d44fed92bf5528bad0d311f26bdcdc90f4993460b4077378f3e"),
    ("code_ke_47ac0e2d", 0): (11855, "61e700ba142852a7d397388ab02f2f51a5a49b4f9d8babd2f860da03e620c785"),
    ("code_ke_47ac0e2d", 3): (22330, "fe1e07a166983decdc928b899e3e71c2f75b5642b0cc6a5859776f6acc145653"),
}


@pytest.mark.parametrize("key", list(DIGESTS), ids=[f"{s}-{n}shot" for s, n in DIGESTS])
def test_rendering_is_byte_exact_in_both_modes(bench: KE, samples: dict, key: tuple[str, int]) -> None:
    sid, shots = key
    sample = samples[sid]
    chat = bench.build(sample, shots)
    completion = bench.build_completion(sample, shots)
    # chat: one user message, no system message; completion: the same text, answer prefix in meta
    assert [m["role"] for m in chat.messages] == ["user"] and chat.prompt is None
    text = chat.messages[0]["content"]
    assert completion.prompt == text and completion.messages is None
    assert completion.meta == {"answer_prefix": ANSWER_PREFIX}
    examples = list(bench.data.icl.samples) if shots == 3 else []
    assert text == independent_prompt(sample.data, examples)
    assert (len(text), sha256_hex(text)) == DIGESTS[key]
    assert text.endswith("The critical steps are:\n- step_")


def test_truncation_counts_code_points(bench: KE, samples: dict) -> None:
    sample = samples["code_ke_a0e6c3f5"].data
    text = bench.build(samples["code_ke_a0e6c3f5"], 0).messages[0]["content"]
    thought = next(s for s in sample["trajectory_steps"] if s["step_id"] == "step_011")["thought"]
    assert len(thought) > 400
    assert "  Thought: " + thought[:400] + "\n" in text and thought[:401] not in text
    obs = next(s for s in sample["trajectory_steps"] if s["step_id"] == "step_015")["observation"]
    assert len(obs) > 2000
    assert "  Observation: " + obs[:800] + "\n\n[step_016]" in text and obs[:801] not in text


def test_icl_truncation_and_no_labels(bench: KE, samples: dict) -> None:
    text = bench.build(samples["code_ke_834b34a9"], 3).messages[0]["content"]
    ex = next(e for e in bench.data.icl.samples if e["sample_id"] == "code_ke_1f0c77a2")
    long_thought = next(s for s in ex["trajectory_steps"] if s["step_id"] == "step_003")["thought"]
    assert len(long_thought) == 340
    assert "  Thought: " + long_thought[:200] + "\n" in text and long_thought[:201] not in text
    assert "The critical steps are: step_000, step_002\n\n" in text
    # the examples sit after the "Output only ..." paragraph, before the graded task
    assert text.index("Output only the list") < text.index(ex["user_task"]) < text.index(samples["code_ke_834b34a9"].data["user_task"])
    for word in ('"label"', "gold_step_ids", "label_stats", "n_uncertain", "final_output"):
        assert word not in text
    empty_obs = next(s for s in ex["trajectory_steps"] if s["step_id"] == "step_004")
    assert empty_obs["observation"] == ""
    assert "Observation Type: " + empty_obs["obs_type"] + "\n  Observation: \n\n[step_005]" in text


def test_shots_other_than_0_or_3_are_refused(bench: KE, samples: dict) -> None:
    with pytest.raises(ValueError, match="shots 0 or 3"):
        bench.build(samples["code_ke_834b34a9"], 1)


def test_sample_text_is_not_formatted(bench: KE, samples: dict) -> None:
    from evalkit.types import Sample

    data = dict(samples["code_ke_834b34a9"].data, user_task="use {x} and %s {code_traj.user_task}")
    text = bench.build(Sample(id="x", subset="easy", data=data), 0).messages[0]["content"]
    assert "Task: use {x} and %s {code_traj.user_task}\n\nTrajectory Steps:" in text
