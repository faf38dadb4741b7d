"""ACEBench agent end-state checker and process accuracy (spec §4.4; pitfalls 1–3, 15, 23, 24, 31)."""

from __future__ import annotations

import pytest

from evalkit.benchmarks.acebench.agent.scoring import check_end_state, process_accuracy
from evalkit.types import Trajectory
from tests.benchmarks.agent_support import Scripted, run, score


def test_pitfall_1_milestones_are_raw_strings(agent_en):
    milestones = agent_en.by_id["en/agent_multi_step_0"].data["answer"]["mile_stone"]
    assert len(milestones) == 3
    trace = ["[login_food_platform(username='Eve', password='password123')]"]
    assert process_accuracy(trace, milestones) == 0.333


def test_pitfall_2_unmatched_and_empty_milestones():
    assert process_accuracy([], ["x"]) == 0.0
    assert process_accuracy(["y", "z"], ["x"]) == 0.0
    assert process_accuracy(["anything"], []) == 1.0


def test_pitfall_3_cursor_never_rewinds_and_alternatives_take_the_max():
    assert process_accuracy(["x", "a", "y", "c"], ["a", "b", "c"]) == 0.333
    # 'b' is searched after 'a' and consumes the rest: 'c' is never found
    assert process_accuracy(["a", "c", "b"], ["a", "b", "c"]) == 0.667
    assert process_accuracy(["c", "a"], ["a", "c"]) == 0.5
    assert process_accuracy(["a", "c"], [["a", "b"], ["a", "c"], ["q"]]) == 1.0
    assert process_accuracy(["a"], [["a", "b", "c"], ["z"]]) == 0.333
    # comparisons strip surrounding whitespace on both sides
    assert process_accuracy([" [f()]\n"], ["[f()] "]) == 1.0


def test_pitfall_23_process_is_one_when_end_state_passes():
    assert process_accuracy([], ["a", "b"], end_state_passed=True) == 1.0


def test_checker_class_count_must_match():
    expected = [{"BaseApi": {"wifi": True, "logged_in": True}}]
    assert check_end_state([], expected).passed is False
    verdict = check_end_state([{"BaseApi": {"wifi": True, "logged_in": True}}, {"MessageApi": {"inbox": {}}}], expected)
    assert verdict.passed is False and verdict.detail.startswith("wrong number of class")
    assert check_end_state([{"BaseApi": {"wifi": True, "logged_in": True}}], expected).passed is True


def test_checker_dict_values_compare_expected_keys_only():
    expected = [{"MessageApi": {"inbox": {"1": {"message": "a"}}}}]
    assert check_end_state([{"MessageApi": {"inbox": {"1": {"message": "a"}, "9": {"message": "extra"}}}}], expected).passed
    assert not check_end_state([{"MessageApi": {"inbox": {"2": {"message": "a"}}}}], expected).passed
    # the value under an expected key is compared whole (deep equality)
    assert not check_end_state([{"MessageApi": {"inbox": {"1": {"message": "a", "time": "t"}}}}], expected).passed


def test_checker_lists_are_ordered_and_equality_is_pythons():
    expected = [{"FoodPlatform": {"users": {}, "logged_in_users": ["Eve", "Helen"], "orders": []}}]
    assert not check_end_state([{"FoodPlatform": {"users": {}, "logged_in_users": ["Helen", "Eve"], "orders": []}}], expected).passed
    assert check_end_state([{"FoodPlatform": {"users": {}, "logged_in_users": ["Eve", "Helen"], "orders": []}}], expected).passed
    assert check_end_state([{"BaseApi": {"wifi": 1, "logged_in": 1.0}}], [{"BaseApi": {"wifi": True, "logged_in": True}}]).passed


def test_checker_iterates_model_attributes():
    # a model attribute the expected entry lacks fails; an expected attribute the model lacks is not checked
    assert not check_end_state([{"BaseApi": {"wifi": True, "extra": 1}}], [{"BaseApi": {"wifi": True}}]).passed
    assert check_end_state([{"BaseApi": {"wifi": True}}], [{"BaseApi": {"wifi": True, "logged_in": False}}]).passed


def test_pitfall_24_misspelled_expected_class_is_skipped_reusing_the_previous_verdict():
    model = [{"BaseApi": {"wifi": True}}, {"ReminderApi": {"reminder_list": {}}}]
    assert check_end_state(model, [{"BaseApi": {"wifi": True}}, {"ReminderAPI": {"reminder_list": {"1": "x"}}}]).passed
    # previous verdict = fail -> the skipped class keeps failing
    assert not check_end_state(model, [{"BaseApi": {"wifi": False}}, {"ReminderAPI": {"reminder_list": {"1": "x"}}}]).passed
    # first same-named model entry is used
    twice = [{"BaseApi": {"wifi": True}}, {"BaseApi": {"wifi": False}}]
    assert check_end_state(twice, [{"BaseApi": {"wifi": True}}, {"BaseApi": {"wifi": True}}]).passed


def test_checker_never_raises_on_odd_shapes():
    for model, expected in [
        ([{"MessageApi": {"inbox": ["a"]}}], [{"MessageApi": {"inbox": {"1": "a"}}}]),
        ([{"MessageApi": "x"}], [{"MessageApi": {"inbox": {}}}]),
        (None, [{"BaseApi": {}}]),
    ]:
        assert check_end_state(model, expected).passed is False
    # a non-mapping model entry matches no class: the expected class is skipped (pass)
    assert check_end_state([1], [{"BaseApi": {}}]).passed is True


def test_score_sample_of_a_junk_trajectory_never_raises(agent_en):
    sample = agent_en.by_id["en/agent_multi_step_0"]
    for junk in ({}, {"data": None}, {"data": {"end_state": "x", "process_trace": 5}}, None):
        result = agent_en.bench.score_sample(sample, Trajectory.from_dict(junk))
        assert result.scores["accuracy"] == 0.0


def test_pitfall_24_reference_on_agent_multi_step_0_skips_reminderapi(agent_en):
    expected = agent_en.by_id["en/agent_multi_step_0"].data["answer"]["ground_truth"]
    assert any("ReminderAPI" in e for e in expected)
    agent, user = agent_en.bench.reference_agents(agent_en.by_id["en/agent_multi_step_0"])
    trajectory = run(agent_en, "en/agent_multi_step_0", agent, user)
    assert score(agent_en, "en/agent_multi_step_0", trajectory).scores["accuracy"] == 1.0


def test_pitfall_15_end_state_is_json_round_tripped(agent_en):
    agent, user = agent_en.bench.reference_agents(agent_en.by_id["en/agent_multi_turn_0"])
    trajectory = run(agent_en, "en/agent_multi_turn_0", agent, user)
    inbox = next(e["MessageApi"] for e in trajectory.data["end_state"] if "MessageApi" in e)["inbox"]
    assert all(isinstance(k, str) for k in inbox) and "7" in inbox
    verdict = score(agent_en, "en/agent_multi_turn_0", trajectory)
    assert verdict.scores == {"accuracy": 1.0, "process_acc": 1.0}
    assert verdict.parsed == trajectory.data["end_state"]
    # with int keys (the live state) the expected "7" would not be found
    live = [{k: ({a: ({int(i): m for i, m in v.items()} if a == "inbox" else v) for a, v in attrs.items()})} for e in trajectory.data["end_state"] for k, attrs in e.items()]
    assert check_end_state(live, agent_en.by_id["en/agent_multi_turn_0"].data["answer"]["ground_truth"]).passed is False


def test_process_acc_of_a_partial_rollout(agent_en):
    # en agent_multi_turn_0 milestones: wifi, earliest id, delete 3, send; do only the first two
    agent = Scripted(["[turn_on_wifi()]", "[get_earliest_message_id()]"], default="finish conversation")
    trajectory = run(agent_en, "en/agent_multi_turn_0", agent)
    verdict = score(agent_en, "en/agent_multi_turn_0", trajectory)
    assert verdict.scores == {"accuracy": 0.0, "process_acc": 0.5}
    assert verdict.detail and "inbox" in verdict.detail


@pytest.mark.parametrize("records", [[1.0, 0.0], [0.0, 0.0]])
def test_aggregate_agent_metrics_and_overall_weight(agent_en, records):
    samples = [agent_en.by_id["en/agent_multi_step_0"], agent_en.by_id["en/agent_multi_turn_0"]]
    rows = [
        {"sample_id": s.id, "scores": {"accuracy": acc, "process_acc": 0.25 if acc == 0 else 1.0}}
        for s, acc in zip(samples, records)
    ]
    metrics = agent_en.bench.aggregate(samples, rows)
    assert metrics["accuracy/agent_multi_step"] == records[0]
    assert metrics["process_acc/agent_multi_step"] == (1.0 if records[0] else 0.25)
    assert metrics["process_acc/agent_multi_turn"] == 0.25
    assert metrics["accuracy/AGENT"] == pytest.approx(sum(records) / 2)
    assert metrics["overall"] == pytest.approx(sum(records) / 2)  # AGENT alone, renormalised
    counts = agent_en.bench.category_counts(samples, rows)
    rows_table = agent_en.bench.report_tables(metrics, None, counts)[0][2]
    assert rows_table[0] == ["agent_multi_step", "1", f"{records[0]:.4f}", "1.0000" if records[0] else "0.2500"]


def test_overall_uses_agent_weight(acebench_dir):
    from evalkit.benchmarks.acebench.metrics import overall_score

    assert overall_score({"NORMAL": 1.0, "SPECIAL": 1.0, "AGENT": 0.0}) == pytest.approx((0.578 + 0.2676) / 1.0001)
    assert overall_score({"NORMAL": 0.0, "AGENT": 1.0}) == pytest.approx(0.1545 / (0.578 + 0.1545))
