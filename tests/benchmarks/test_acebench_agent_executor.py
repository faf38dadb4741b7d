"""ACEBench agent executor and simulators (spec §3.3, §5.1–§5.3, §5.7; pitfalls 18, 20, 26–30)."""

from __future__ import annotations

import json
import os

import pytest

from evalkit.benchmarks.acebench.agent.envs import Environment, extract_seed
from evalkit.benchmarks.acebench.agent.dispatch import (
    MULTI_TURN_ERROR_TEXT,
    NUDGE,
    UNBOUND_MESSAGE,
    Undecodable,
    decode_message,
    apply_calls,
    multi_turn_error_observation,
    observation,
)
from tests.benchmarks.agent_support import Scripted, run, state_of

PHONE = ["BaseApi", "MessageApi", "ReminderApi", "FoodPlatform"]


@pytest.fixture(scope="module")
def seeds(agent_en, agent_zh):
    out = {}
    for lang, loaded in (("en", agent_en), ("zh", agent_zh)):
        out[lang] = extract_seed([s.data["answer"]["ground_truth"] for s in loaded.samples])
    return out


def env(seeds, lang="en", involved=PHONE, config=None):
    return Environment(lang, list(involved), config if config is not None else {"BaseApi": {"wifi": True, "logged_in": True}}, seeds[lang])


def do(environment, text, strict=True, abort=False):
    return apply_calls(environment, decode_message(text, strict), abort_on_error=abort)


# ---- seed texts come from the data -----------------------------------------------------------
def test_seed_texts_are_read_from_ground_truth(seeds, agent_en):
    gt_text = json.dumps([s.data["answer"]["ground_truth"] for s in agent_en.samples], ensure_ascii=False)
    assert len(seeds["en"].inbox) == 6 and len(seeds["en"].reminders) == 3
    assert all(json.dumps(text, ensure_ascii=False)[1:-1] in gt_text for text in seeds["en"].inbox.values())
    assert seeds["en"].inbox[2] != seeds["zh"].inbox[2]  # zh variant of message 2
    assert seeds["en"].inbox[1] == seeds["zh"].inbox[1]
    assert seeds["zh"].reminders[3][0] == seeds["en"].reminders[3][0] and seeds["zh"].reminders[3][1] != seeds["en"].reminders[3][1]


# ---- §3.3 decoding --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[turn_on_wifi()]", ["turn_on_wifi"]),
        ("turn_on_wifi()", ["turn_on_wifi"]),
        (" [turn_on_wifi()]", ["turn_on_wifi"]),
        ("[turn_on_wifi(), login_device()]", ["turn_on_wifi", "login_device"]),
        ("turn_on_wifi(), login_device()", ["turn_on_wifi", "login_device"]),
        ("hello", []),
        ("[42]", []),
    ],
)
def test_decodable(text, names):
    assert [c.name for c in decode_message(text, strict=True)] == names


@pytest.mark.parametrize(
    "text",
    [
        "[turn_on_wifi()]\n",  # pitfall 30
        "[turn_on_wifi()] ",
        "  [turn_on_wifi()]",
        "[a()][b()]",
        "Sure! [turn_on_wifi()]",
        "[add_food_delivery_order(username='Eve', merchant_name='Domino's', items=[])]",
        "[send_message(sender_name={'a': 'b'}, receiver_name='Frank', message='x')]",  # pitfall 29
        "[send_message(sender_name={}, receiver_name='Frank', message='x')]",
        "[f(x=lambda: 1)]",
        "[f(x={1, 2})]",
        "",
    ],
)
def test_undecodable(text):
    with pytest.raises(Undecodable):
        decode_message(text, strict=True)


def test_strict_vs_lenient_element_rule():
    with pytest.raises(Undecodable):
        decode_message("[turn_on_wifi(), 1]", strict=True)
    assert [c.name for c in decode_message("[turn_on_wifi(), 1]", strict=False)] == ["turn_on_wifi"]


def test_argument_values():
    (call,) = decode_message("[f(a='Hello Frank', b=-5, c=Eve, d=g(), e=x[0], f=1+2, g=(1, 2), h=[{'p': 'q'}])]", True)
    assert call.arguments == {"a": "Hello Frank", "b": -5, "c": "Eve", "d": "g()", "e": "x[0]", "f": 3, "g": (1, 2), "h": [{"p": "q"}]}
    assert call.raises is None
    (nested,) = decode_message("[f(a=g(x=1))]", True)
    assert nested.arguments == {"a": {"g": {"x": 1}}} and nested.raises


# ---- §5.2 dispatch --------------------------------------------------------------------------
def test_pitfall_18_wifi_on_every_instance_then_send(seeds):
    e = env(seeds, involved=["BaseApi", "MessageApi"], config={"BaseApi": {"wifi": False, "logged_in": True}})
    done = do(e, "[turn_on_wifi()]")
    assert [inst.wifi for _, inst in e.instances] == [True, True]
    assert done.results[0]["status"] is True
    sent = do(e, "[delete_message(message_id=1), send_message(sender_name='Eve', receiver_name='Frank', message='hi')]")
    assert [r["status"] for r in sent.results] == [True, True]
    assert e.snapshot()[1]["MessageApi"]["inbox"]["7"] == {"sender_id": "USR100", "receiver_id": "USR101", "message": "hi"}


def test_pitfall_20_model_text_is_never_executed(seeds, tmp_path, agent_en):
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"
    for text in (
        f"[send_message(sender_name='Eve', receiver_name='Frank', message={payload})]",
        f"[delete_message(message_id={payload})]",
        f"[send_message(sender_name=__import__('os').getcwd(), receiver_name='Frank', message='x')]",
    ):
        e = env(seeds)
        before = e.snapshot()[1]
        try:
            apply_calls(e, decode_message(text, strict=True), abort_on_error=False)
        except Undecodable:
            pass
        assert e.snapshot()[1] == before
    assert not marker.exists() and not os.path.exists(marker)
    # and through a whole multi-step rollout
    trajectory = run(agent_en, "en/agent_multi_step_4", Scripted([f"[delete_message(message_id={payload})]"]))
    assert not marker.exists()
    assert set(state_of(trajectory, "MessageApi")["inbox"]) == {"1", "2", "3", "4", "5", "6"}


def test_pitfall_26_multi_turn_aborts_at_first_raising_call(seeds):
    e = env(seeds, config={"BaseApi": {"wifi": False}})
    done = do(e, "[foo(), turn_on_wifi()]", strict=False, abort=True)
    assert done.error is not None and str(done.error) == UNBOUND_MESSAGE
    assert e.instances[0][1].wifi is False
    chars = multi_turn_error_observation()
    assert chars == list(MULTI_TURN_ERROR_TEXT) and "".join(chars) == "Error during execution: {str(e)}"
    # multi-step runs the second call anyway
    e = env(seeds, config={"BaseApi": {"wifi": False}})
    done = do(e, "[foo(), turn_on_wifi()]")
    assert done.results[0] == "Error during execution: " + UNBOUND_MESSAGE
    assert done.results[1]["status"] is True and e.instances[0][1].wifi is True


def test_pitfall_26_through_the_multi_turn_loop(agent_en):
    agent = Scripted(["[foo(), turn_on_wifi()]"], default="finish conversation")
    trajectory = run(agent_en, "en/agent_multi_turn_0", agent)
    execution = trajectory.messages[2]
    assert execution["role"] == "execution" and execution["observation"] == list("Error during execution: {str(e)}")
    assert execution["content"] == str(list("Error during execution: {str(e)}"))
    assert trajectory.data["recorded"] is False and trajectory.data["end_state"] == []


def test_pitfall_27_unknown_method_reuses_previous_result(seeds):
    for abort in (False, True):
        e = env(seeds)
        done = do(e, "[turn_on_wifi(), no_such_method(x=1)]", strict=False, abort=abort)
        assert done.error is None
        assert done.results[1] is done.results[0] and done.results[1]["status"] is True


def test_unknown_method_first_raises_unbound(seeds):
    done = do(env(seeds), "[search_reminders(keyword='x')]")  # en ReminderApi has no search_reminders
    assert done.results == ["Error during execution: " + UNBOUND_MESSAGE]


def test_errors_keep_earlier_state_and_later_calls_run(seeds):
    e = env(seeds)
    done = do(e, "[send_message(sender_name='Eve'), delete_message(message_id=2), get_all_message_times_with_ids()]")
    assert done.results[0].startswith("Error during execution: ") and "receiver_name" in done.results[0]
    assert done.results[1]["status"] is True
    assert 2 not in done.results[2]


def test_dict_argument_nested_call_raises_at_execution(seeds):
    e = env(seeds)
    done = do(e, "[send_message(sender_name=g(x=1), receiver_name='Frank', message='hi')]")
    assert done.results[0].startswith("Error during execution: ") and len(e.instances[1][1].inbox) == 6


def test_values_are_fresh_per_target_and_round_trip_through_repr(seeds):
    e = env(seeds)
    done = do(e, "[add_reminder(title='t', description='d', time=1e999)]")
    assert done.results[0].startswith("Error during execution: ")
    assert len(e.instances[2][1].reminder_list) == 3


# ---- §5.3 observations ------------------------------------------------------------------------
def test_observation_formatting():
    obs = observation([{1: "a"}, ["a", "b"], [1, 2], True, None, 1.5, "text", "7", {"x": {1, 2}}])
    # a list travels as its repr text, which JSON parses back only when it is valid JSON
    assert obs == [{"1": "a"}, "['a', 'b']", [1, 2], "True", "None", 1.5, "text", 7, "{'x': {1, 2}}"]


def test_multi_step_nudge_is_not_a_list(agent_en):
    trajectory = run(agent_en, "en/agent_multi_step_0", Scripted(["hello?", "finish conversation"]))
    assert trajectory.messages[2]["content"] == NUDGE and "finish conversation" not in NUDGE


# ---- §5.1 environment -------------------------------------------------------------------------
def test_config_applied_twice_and_defaults(seeds):
    e = env(seeds, config={"FoodPlatform": {"logged_in_users": ["Eve"], "wifi": True}, "BaseApi": {"logged_in": False}})
    food = e.instances[3][1]
    assert food.logged_in_users == [] and food.wifi is False and food.logged_in is False
    typo = env(seeds, config={"Baspi": {"wifi": True, "logged_in": False}})
    assert [(i.wifi, i.logged_in) for _, i in typo.instances] == [(False, True)] * 4


def test_env_snapshot_graded_attributes_only(seeds):
    snap = env(seeds, involved=PHONE + ["Travel"]).snapshot()
    assert [list(e) for e in snap] == [["BaseApi"], ["MessageApi"], ["ReminderApi"], ["FoodPlatform"], ["Travel"]]
    assert [sorted(next(iter(e.values()))) for e in snap] == [
        ["logged_in", "wifi"], ["inbox"], ["reminder_list"], ["logged_in_users", "orders", "users"], ["reservations", "users"],
    ]


# ---- §5.7 simulator rules ---------------------------------------------------------------------
def test_message_rules(seeds):
    e = env(seeds)
    msg = e.instances[1][1]
    assert do(e, "[send_message(sender_name='Eve', receiver_name='Frank', message='x')]").results[0]["status"] is False  # full
    assert do(e, "[delete_message(message_id='3')]").results[0]["status"] is False  # type-sensitive
    assert do(e, "[get_latest_message_id()]").results[0]["message_id"] == 4
    assert do(e, "[get_earliest_message_id()]").results[0]["message_id"] == 3
    do(e, "[delete_message(message_id=3), send_message(sender_name='Eve', receiver_name='Frank', message='x')]")
    assert list(msg.inbox) == [1, 2, 4, 5, 6, 7]
    for call in ("get_all_message_times_with_ids()", "get_latest_message_id()", "get_earliest_message_id()"):
        assert do(e, f"[{call}]").results[0] == "Error during execution: 'time'"  # raises once a message was sent
    found = do(e, "[search_messages(user_name='Jack', keyword='CALL')]").results[0]
    assert [m["id"] for m in found["messages"]] == [5]
    e2 = env(seeds, config={"BaseApi": {"logged_in": False}})
    assert do(e2, "[search_messages(user_name='Jack', keyword='call')]").results[0]["status"] is True  # no login check


def test_reminder_rules(seeds):
    e = env(seeds)
    done = do(e, "[add_reminder(title='a', description='b', time=[2024, 1])]")
    assert done.results[0]["status"] is True
    assert e.instances[2][1].reminder_list[4] == {"reminder_id": 4, "title": "a", "description": "b", "time": [2024, 1], "notified": False}
    assert do(e, "[delete_reminder(reminder_id=1001)]").results[0]["status"] is False
    assert do(e, "[delete_reminder(reminder_id=1)]").results[0]["status"] is True
    assert not hasattr(e.instances[2][1], "mark_as_notified")
    zh = env(seeds, lang="zh")
    assert do(zh, "[mark_as_notified(reminder_id=2)]").results[0]["status"] is True
    assert zh.instances[2][1].reminder_list[2]["notified"] is True
    assert do(zh, "[search_reminders(keyword='zzz')]").results[0]["status"] is False
    assert do(zh, "[search_reminders(keyword='team')]").results[0].startswith("Error during execution: ")


def test_food_rules_and_language_differences(seeds):
    for lang, merchant, product in (("en", "Jiutian BBQ", "Grilled Pork Belly"), ("zh", "九田家烤肉", "烤五花肉")):
        e = env(seeds, lang=lang)
        do(e, "[login_food_platform(username='Jack', password='password654')]")
        food = e.instances[3][1]
        food.users["Jack"]["balance"] = 78.0
        r = do(e, f"[add_food_delivery_order(username='Jack', merchant_name='{merchant}', items=[{{'product': '{product}'}}])]").results[0]
        # en: total > balance refused, zh: total >= balance refused
        assert r["status"] is (lang == "en")
        assert len(food.orders) == (1 if lang == "en" else 0)
    e = env(seeds)
    do(e, "[login_food_platform(username='Eve', password='password123')]")
    bad = do(e, "[add_food_delivery_order(username='Eve', merchant_name='Heytea', items=[{'product': 'Cheese Milk Tea', 'quantity': 0}])]")
    assert bad.results[0]["status"] is False
    ok = do(e, "[add_food_delivery_order(username='Eve', merchant_name='Heytea', items=[{'product': 'Cheese Milk Tea', 'quantity': True}])]")
    assert ok.results[0]["status"] is True and e.instances[3][1].orders[0]["total_price"] == 25.0
    assert do(e, "[search_orders(keyword='cheese')]").results[0]["status"] is True
    assert do(e, "[check_balance(user_name='Nobody')]").results[0] == 0.0
    zh = env(seeds, lang="zh")
    do(zh, "[login_food_platform(username='Eve', password='password123'), add_food_delivery_order(username='Eve', merchant_name='喜茶', items=[{'product': '芝士奶茶'}])]")
    assert do(zh, "[search_orders(keyword='喜茶')]").results[0]["status"] is True
    assert do(zh, "[search_orders(keyword='芝士')]").results[0].startswith("Error during execution: ")  # zh bug
    nowifi = env(seeds, config={"BaseApi": {"wifi": False}})
    assert do(nowifi, "[login_food_platform(username='Eve', password='password123')]").results[0]["status"] is False


def test_travel_rules(seeds):
    for lang, economy in (("en", "Economy Class"), ("zh", "经济舱")):
        e = env(seeds, lang=lang, involved=["Travel"], config={})
        travel = e.instances[0][1]
        r = do(e, f"[reserve_flight(user_id='user1', password='password123', flight_no='CZ4352', cabin='{economy}', payment_method='cash', baggage_count=2)]")
        assert "res_5" in r.results[0]
        assert travel.users["user1"]["cash_balance"] == 2000.0 - 1600 - 50
        assert travel.reservations[-1] == {"reservation_id": "res_5", "user_id": "user1", "flight_no": "CZ4352", "payment_method": "cash", "cabin": economy, "baggage": 2}
        # unknown flight and bad credentials raise
        assert do(e, "[reserve_flight(user_id='user1', password='password123', flight_no='XX1', cabin='x', payment_method='cash', baggage_count=1)]").results[0].startswith("Error during execution: ")
        assert do(e, f"[reserve_flight(user_id='user1', password='bad', flight_no='CA1234', cabin='{economy}', payment_method='cash', baggage_count=1)]").results[0].startswith("Error during execution: ")
        # cancel refunds to cash but keeps the reservation
        before = travel.users["user2"]["cash_balance"]
        do(e, "[cancel_reservation(user_id='user2', reservation_id='res_3', reason='changed plans')]")
        assert travel.users["user2"]["cash_balance"] == before + 2500 and any(r["reservation_id"] == "res_3" for r in travel.reservations)
        # res_4's flight does not exist: modification fails, nothing changes
        do(e, f"[modify_flight(user_id='user2', reservation_id='res_4', new_cabin='{economy}')]")
        assert travel.reservations[3]["cabin"] != economy
    e = env(seeds, involved=["Travel"], config={})
    travel = e.instances[0][1]
    # cabin change on res_2 (MU5678 business 3000 -> economy 1900): refund 1100 to bank
    do(e, "[modify_flight(user_id='user1', reservation_id='res_2', new_cabin='Economy Class')]")
    assert travel.users["user1"]["bank_balance"] == 50000.0 + 1100 and travel.reservations[1]["cabin"] == "Economy Class"
    # baggage: regular economy allows 1; 1 + 2 bags -> 2 extra -> 100
    do(e, "[modify_flight(user_id='user1', reservation_id='res_1', add_baggage=2, new_payment_method='cash')]")
    assert travel.users["user1"]["cash_balance"] == 2000.0 - 100 and travel.reservations[0]["baggage"] == 3
    # a non cash/bank method makes charges silent no-ops, the change still happens
    do(e, "[modify_flight(user_id='user1', reservation_id='res_1', new_cabin='Business Class', new_payment_method='card')]")
    assert travel.reservations[0]["cabin"] == "Business Class" and travel.users["user1"]["cash_balance"] == 1900.0
    # flight change to a different route fails
    assert do(e, "[modify_flight(user_id='user1', reservation_id='res_2', new_flight_no='CA1234')]").results[0] != ""
    assert travel.reservations[1]["flight_no"] == "MU5678"
    assert do(e, "[modify_flight(user_id='user1', reservation_id='res_2', new_flight_no='CZ4321')]").results[0]
    assert travel.reservations[1]["flight_no"] == "CZ4321"
    # transfer flights and lookups
    pairs = do(e, "[find_transfer_flights(origin_city='Beijing', transfer_city='Nanjing', destination_city='Shenzhen')]").results[0]
    assert isinstance(pairs, list) and len(pairs) == 1 and pairs[0]["first_leg"]["flight_no"] == "MU3561"
    assert observation([pairs])[0].startswith("[{'first_leg'")
    assert do(e, "[get_user_details(user_id='user3', password='password789')]").results[0]["membership_level"] == "gold"
