"""ACEBench agent rollouts through the real loops (spec §5.4–§5.6, §6.3, §2.2)."""

from __future__ import annotations

import asyncio
import hashlib
import pickle

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.agent.dispatch import NUDGE
from evalkit.models.base import ModelCallError
from evalkit.benchmarks.acebench.agent.loops import AceBenchSolver
from evalkit.benchmarks.base import Generate
from evalkit.types import Failure
from tests.benchmarks.agent_support import Scripted, run, score, state_of

CATEGORIES = ("agent_multi_step", "agent_multi_turn")


def _digest(text: str) -> tuple[int, str]:
    return len(text), hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _loaded(request, language):
    return request.getfixturevalue(f"agent_{language}")


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("category", CATEGORIES)
def test_reference_agent_scores_one_on_every_record(request, language, category):
    loaded = _loaded(request, language)
    samples = [s for s in loaded.samples if s.subset == category]
    assert len(samples) == (20 if category == "agent_multi_step" else 30)
    runner = loaded.bench.solver()
    failures = {}
    for sample in samples:
        agent, user = loaded.bench.reference_agents(sample)
        trajectory = asyncio.run(runner.run(sample, agent, user))
        verdict = loaded.bench.score_sample(sample, trajectory)
        assert trajectory.data["recorded"] is True and trajectory.data["category"] == category
        if verdict.scores != {"accuracy": 1.0, "process_acc": 1.0}:
            failures[sample.id] = verdict.detail
        # the script went through the loop: every scripted call is in the process trace
        assert trajectory.data["process_trace"] == agent.script
    assert failures == {}


@pytest.mark.parametrize("language", ["en", "zh"])
def test_negative_oracle_never_calling_scores_zero_everywhere(request, language):
    loaded = _loaded(request, language)
    runner = loaded.bench.solver()
    assert len(loaded.samples) == 50
    for sample in loaded.samples:
        agent = Scripted(default="I would rather just talk about it.")
        if sample.subset == "agent_multi_step":
            agent = Scripted(["I cannot help with that."], default="finish conversation")
        user = Scripted([sample.data["prompt"]["question"]], default="Please go on.")
        trajectory = asyncio.run(runner.run(sample, agent, user))
        verdict = loaded.bench.score_sample(sample, trajectory)
        assert verdict.scores["accuracy"] == 0.0, sample.id
        assert trajectory.data["end_state"] == [] and trajectory.data["recorded"] is False
        assert verdict.detail.startswith("wrong number of class")


def test_pitfall_31_agent_multi_turn_7_fails_without_recorded_state(agent_en):
    # the only checked class equals the initial state (Reminderpi typo): it would pass if
    # the state were always snapshotted (EvalScope), it fails upstream
    trajectory = run(agent_en, "en/agent_multi_turn_7", Scripted(default="How can I help?"))
    verdict = score(agent_en, "en/agent_multi_turn_7", trajectory)
    assert verdict.scores["accuracy"] == 0.0 and "wrong number of class" in verdict.detail
    # a single clean executor turn that changes nothing records the state -> it passes
    trajectory = run(agent_en, "en/agent_multi_turn_7", Scripted(["[view_all_reminders()]"], default="finish conversation"))
    assert score(agent_en, "en/agent_multi_turn_7", trajectory).scores["accuracy"] == 1.0


def test_pitfall_19_concurrent_rollouts_do_not_share_state(agent_en):
    sample = agent_en.by_id["en/agent_multi_turn_0"]
    runner = agent_en.bench.solver()
    good_agent, good_user = agent_en.bench.reference_agents(sample)
    # the other rollout deletes a message, and turns wifi on too
    other = Scripted(["[turn_on_wifi()]", "[delete_message(message_id=1)]"], default="finish conversation")

    async def both():
        return await asyncio.gather(
            runner.run(sample, good_agent, good_user),
            runner.run(sample, other, Scripted([sample.data["prompt"]["question"]])),
        )

    good, bad = asyncio.run(both())
    assert agent_en.bench.score_sample(sample, good).scores["accuracy"] == 1.0
    inbox_good, inbox_bad = state_of(good, "MessageApi")["inbox"], state_of(bad, "MessageApi")["inbox"]
    assert "1" in inbox_good and "3" not in inbox_good and "7" in inbox_good
    assert "1" not in inbox_bad and "3" in inbox_bad and "7" not in inbox_bad
    # and a second run starts from the initial state again
    again = run(agent_en, "en/agent_multi_turn_0", Scripted(["[get_latest_message_id()]"]))
    assert set(state_of(again, "MessageApi")["inbox"]) == {"1", "2", "3", "4", "5", "6"}


def test_runner_is_picklable_and_holds_only_data(agent_en):
    runner = agent_en.bench.solver()
    clone = pickle.loads(pickle.dumps(runner))
    sample = agent_en.by_id["en/agent_multi_step_2"]
    agent, user = agent_en.bench.reference_agents(sample)
    trajectory = asyncio.run(clone.run(sample, agent, user))
    assert agent_en.bench.score_sample(sample, trajectory).scores["accuracy"] == 1.0


def test_model_call_error_propagates(agent_en):
    class Failing:
        async def generate(self, request):
            raise ModelCallError(Failure("timeout", "too slow", actor="agent"))

    with pytest.raises(ModelCallError) as err:
        run(agent_en, "en/agent_multi_step_0", Failing())
    assert err.value.failure.actor == "agent"


# ---- prompts (spec §2.2 assembly digests) ---------------------------------------------------
@pytest.mark.parametrize(
    ("language", "record", "expected"),
    [
        ("en", "agent_multi_step_0", {"system": (1921, "c6d52166e4945564"), "user": (5042, "ea756c20da0e2ab1")}),
        ("zh", "agent_multi_step_0", {"system": (788, "639da606b6f7aeaf"), "user": (2346, "4cf9280ef69c1465")}),
    ],
)
def test_multi_step_first_turn_prompt_digests(request, language, record, expected):
    loaded = _loaded(request, language)
    agent = Scripted(default="finish conversation")
    run(loaded, f"{language}/{record}", agent)
    first = agent.requests[0].messages
    assert [m["role"] for m in first] == ["system", "user"]
    assert _digest(first[0]["content"]) == expected["system"]
    assert _digest(first[1]["content"]) == expected["user"]
    assert agent.requests[0].params == {}
    # build() gives the same first-turn prompt (identity of the sample)
    assert loaded.bench.build(loaded.by_id[f"{language}/{record}"], 0).messages == first


@pytest.mark.parametrize(
    ("language", "record", "agent_system", "sim_system"),
    [
        ("en", "agent_multi_turn_0", (4448, "ff008df61d760805"), (1553, "643a7d409b08fbac")),
        ("en", "agent_multi_turn_20", (6809, "0e5e1d9aa17494e9"), (1658, "6385b7f8a37a920c")),
        ("zh", "agent_multi_turn_0", (1431, "20533056ae7dfdcb"), (569, "1c9cf353feb06cdd")),
        ("zh", "agent_multi_turn_20", (2067, "d6ef19771288aee3"), (544, "a58945fc198fbe5e")),
    ],
)
def test_multi_turn_prompt_digests_and_simulator_roles(request, language, record, agent_system, sim_system):
    loaded = _loaded(request, language)
    agent = Scripted(["agent: Who should receive it?"], default="finish conversation")
    user = Scripted(["I need help.", "Frank."], default="finish conversation")
    run(loaded, f"{language}/{record}", agent, user)
    assert _digest(agent.requests[0].messages[0]["content"]) == agent_system
    sim_first = user.requests[0].messages
    assert [m["role"] for m in sim_first] == ["system", "user"]
    assert _digest(sim_first[0]["content"]) == sim_system
    opening = loaded.bench.templates.get(
        f"model_inference/multi_turn/APIModel_user.py::APIUSER.get_init_prompt.first_user_turn.{language}"
    )
    assert sim_first[1]["content"] == opening
    # second simulator call: its reply came back as role system, the agent's message as
    # role user with one leading "agent:" removed
    second = user.requests[1].messages
    assert [m["role"] for m in second] == ["system", "user", "system", "user"]
    assert second[2]["content"] == "I need help." and second[3]["content"] == " Who should receive it?"


# ---- transcripts (pitfalls 21, 22) ----------------------------------------------------------
def test_pitfall_21_multi_step_transcript_hides_agent_turns(agent_en):
    agent = Scripted(["[turn_on_wifi()]", "I am thinking.", "finish conversation"])
    trajectory = run(agent_en, "en/agent_multi_step_1", agent)
    last_prompt = agent.requests[-1].messages[1]["content"]
    question = agent_en.by_id["en/agent_multi_step_1"].data["prompt"]["question"]
    assert "user:" + question + "\n" in last_prompt
    assert "execution result:[{'status': True" in last_prompt
    assert "execution result:" + NUDGE + "\n" in last_prompt
    assert "agent:" not in last_prompt and "[turn_on_wifi()]" not in last_prompt
    assert [m["role"] for m in trajectory.messages] == ["user", "agent", "execution", "agent", "execution", "agent"]


def test_pitfall_21_multi_turn_transcript_shows_every_turn(agent_en):
    agent = Scripted(["[turn_on_wifi()]", "Done, anything else?", "finish conversation"])
    user = Scripted(["Please turn on wifi.", "No thanks."])
    run(agent_en, "en/agent_multi_turn_0", agent, user)
    history = agent.requests[-1].messages[1]["content"]
    assert "user:Please turn on wifi.\nagent:[turn_on_wifi()]\nexecution:[{'status': True" in history
    assert "agent:Done, anything else?\nuser:No thanks.\n" in history


def test_pitfall_22_prose_is_traced_and_nudged(agent_en):
    agent = Scripted(["Which user are you?", "[turn_on_wifi()]", "finish conversation"])
    trajectory = run(agent_en, "en/agent_multi_step_1", agent)
    assert trajectory.data["process_trace"] == ["Which user are you?", "[turn_on_wifi()]"]
    nudges = [m for m in trajectory.messages if m["role"] == "execution" and m["decoded"] is False]
    assert len(nudges) == 1 and nudges[0]["content"] == NUDGE
    assert trajectory.data["recorded"] is True  # the second message decoded


# ---- finish marker (pitfall 32) --------------------------------------------------------------
def test_pitfall_32_finish_at_first_reply_does_not_stop(agent_en):
    agent = Scripted(["finish conversation", "finish conversation"])
    trajectory = run(agent_en, "en/agent_multi_step_0", agent)
    # i=0 agent, i=1 nudge, i=2 agent "finish conversation" -> stop
    assert [m["role"] for m in trajectory.messages] == ["user", "agent", "execution", "agent"]
    assert trajectory.data["process_trace"] == ["finish conversation"]
    assert trajectory.final_output == "finish conversation"


def test_pitfall_32_finish_is_case_sensitive_and_bounded_by_max_turns(acebench_dir):
    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, subsets=["agent_multi_step"], max_dialog_turns=7))
    sample = next(s for s in bench.load() if s.id == "en/agent_multi_step_0")
    agent = Scripted(default="Finish Conversation")
    trajectory = asyncio.run(bench.solver().run(sample, agent, None))
    assert len(trajectory.messages) == 1 + 7 and len(agent.requests) == 4


def test_pitfall_32_observation_stops_only_on_list_membership(agent_en):
    # an observation whose list *text* contains the phrase does not stop the loop
    agent = Scripted(["[add_reminder(title='finish conversation now', description='x', time='t')]", "[view_all_reminders()]"], default="finish conversation")
    trajectory = run(agent_en, "en/agent_multi_step_0", agent)
    assert len(agent.requests) == 3 and trajectory.final_output == "finish conversation"


def test_multi_turn_user_finish_stops_from_iteration_two(agent_en):
    agent = Scripted(["Hello! What do you need?", "Anything else?"])
    user = Scripted(["Hi.", "Not yet.", "finish conversation"])
    trajectory = run(agent_en, "en/agent_multi_turn_0", agent, user)
    assert [m["role"] for m in trajectory.messages] == ["user", "agent", "user", "agent", "user"]
    assert trajectory.final_output == "finish conversation" and trajectory.data["recorded"] is False
    # the same words at iteration 1 do not stop: the dialogue runs to max_dialog_turns (40)
    agent = Scripted(["Hello! What do you need?"], default="Still here.")
    user = Scripted(["Hi.", "finish conversation"], default="ok")
    trajectory = run(agent_en, "en/agent_multi_turn_0", agent, user)
    assert len(trajectory.messages) == 1 + 40


# ---- routing (pitfalls 17, 28, 29) -----------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "recipient"),
    [
        ("[send_message(sender_name='Eve', receiver_name='Frank', message='hi')]", "execution"),
        ("[send_message(sender_name='Eve',\n receiver_name='Frank', message='hi')]", "user"),  # pitfall 17
        ("[view_orders(user_name='Eve'), 1]", "user"),  # pitfall 28
        ("[send_message(sender_name={'a': 'b'}, receiver_name='Frank', message='hi')]", "user"),  # pitfall 29
        ("Sure: [turn_on_wifi()]", "user"),
        ("[turn_on_wifi()]\n", "user"),  # pitfall 30
        ("turn_on_wifi()", "user"),  # no brackets: the routing regex needs them
    ],
)
def test_multi_turn_routing(agent_en, reply, recipient):
    agent = Scripted([reply], default="finish conversation")
    user = Scripted(["Hi."], default="finish conversation")
    trajectory = run(agent_en, "en/agent_multi_turn_0", agent, user)
    assert trajectory.messages[1]["recipient"] == recipient
    assert trajectory.messages[2]["role"] == ("execution" if recipient == "execution" else "user")


# ---- prompt language (pitfall 33) -------------------------------------------------------------
def test_pitfall_33_agent_prompt_language_switch(acebench_dir):
    prompts = {}
    for mode in ("matched", "upstream_api"):
        bench = AceBench(AceBenchSettings(data_dir=acebench_dir, subsets=["agent_multi_step", "agent_multi_turn"], agent_prompt_language=mode))
        samples = {s.id: s for s in bench.load()}
        prompts[mode] = (
            bench.build(samples["en/agent_multi_step_0"], 0).messages[0]["content"],
            bench.build(samples["en/agent_multi_turn_0"], 0).messages[0]["content"],
        )
    assert _digest(prompts["matched"][0]) == (1921, "c6d52166e4945564")  # en multi-step template
    assert _digest(prompts["upstream_api"][0]) == (788, "639da606b6f7aeaf")  # zh multi-step template
    assert prompts["matched"][1] == prompts["upstream_api"][1]  # multi-turn is always matched


# ---- engine-facing contract (pitfall 16) -----------------------------------------------------
def test_pitfall_16_multi_turn_needs_a_user_model_and_is_never_dropped(acebench_dir, agent_en):
    settings = AceBenchSettings(data_dir=acebench_dir, subsets=["normal_atom_bool", "agent_multi_turn"])
    bench = AceBench(settings)
    samples = bench.load()
    assert sum(s.subset == "agent_multi_turn" for s in samples) == 30
    assert bench.needs_user_model(samples) is True
    assert bench.needs_user_model([s for s in samples if s.subset != "agent_multi_turn"]) is False
    assert all(bench.is_rollout(s) == (s.subset == "agent_multi_turn") for s in samples)
    with pytest.raises(ValueError, match="user simulator"):
        asyncio.run(agent_en.bench.solver().run(agent_en.by_id["en/agent_multi_turn_0"], Scripted(), None))


def test_rollout_solver_only_when_agent_categories_selected(acebench_en, agent_en):
    assert type(acebench_en.bench.solver()) is Generate
    assert isinstance(agent_en.bench.solver(), AceBenchSolver)
    assert acebench_en.bench.reference_output(acebench_en.samples[0]) != ""
