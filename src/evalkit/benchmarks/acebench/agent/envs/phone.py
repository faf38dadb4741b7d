"""Phone-platform simulators: BaseApi, MessageApi, ReminderApi, FoodPlatform (spec §5.7).

Written from the behaviour tables of the spec. Graded attributes (§4.4) are plain instance
attributes; everything else is private (``_``-prefixed) so that only the simulated API
methods are public (dispatch calls every public method of that name, §5.2). Guards run in
the order of the spec; operations on agent-supplied values are plain Python, so a wrong
value raises where the upstream simulator raises (e.g. an unhashable name).
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from evalkit.benchmarks.acebench.agent.envs.seed import INBOX_LAYOUT, REMINDER_LAYOUT, SeedTexts
from evalkit.benchmarks.acebench.agent.envs.texts import text


def _fail(message: str) -> dict[str, Any]:
    return {"status": False, "message": message}


def _ok(message: str, **extra: Any) -> dict[str, Any]:
    return {"status": True, "message": message, **extra}


def _is_false(value: Any) -> bool:
    """Upstream tests flags with ``== False`` (so ``0`` is off and ``None`` is on)."""
    return value == False  # noqa: E712


class BaseApi:
    """Device flags ``wifi`` (default off) and ``logged_in`` (default on)."""

    graded = ("wifi", "logged_in")

    def __init__(self, language: str, seed: SeedTexts):
        self._lang = language
        self.wifi: Any = False
        self.logged_in: Any = True

    def _load(self, config: dict[str, Any]) -> None:
        self.wifi = config.get("wifi", False)
        self.logged_in = config.get("logged_in", True)

    def _t(self, key: str, **fields: Any) -> str:
        return text(self._lang, key, **fields)

    def turn_on_wifi(self):
        self.wifi = True
        return _ok(self._t("wifi_on"))

    def login_device(self):
        self.logged_in = True
        return _ok(self._t("device_login"))


_MESSAGE_USERS = ("Eve", "Frank", "Grace", "Helen", "Isaac", "Jack")


class MessageApi(BaseApi):
    """Inbox of capacity 6 keyed by int; ids only grow (counter starts at 6)."""

    graded = ("inbox",)

    def __init__(self, language: str, seed: SeedTexts):
        super().__init__(language, seed)
        self._capacity = 6
        self._users = {name: f"USR{100 + i}" for i, name in enumerate(_MESSAGE_USERS)}
        self.inbox: dict[Any, dict[str, Any]] = {}
        for mid, (sender, receiver, time) in INBOX_LAYOUT.items():
            self.inbox[mid] = {"sender_id": sender, "receiver_id": receiver, "message": seed.inbox[mid], "time": time}
        self._counter = 6

    def send_message(self, sender_name, receiver_name, message):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        if _is_false(self.wifi):
            return _fail(self._t("wifi_off"))
        if len(self.inbox) >= self._capacity:
            return _fail(self._t("inbox_full"))
        if sender_name not in self._users or receiver_name not in self._users:
            return _fail(self._t("unknown_party"))
        self._counter += 1
        # a sent message has no "time" key (spec §5.7): later time queries raise KeyError
        self.inbox[self._counter] = {
            "sender_id": self._users[sender_name],
            "receiver_id": self._users[receiver_name],
            "message": message,
        }
        return _ok(self._t("sent", name=receiver_name))

    def delete_message(self, message_id):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        if message_id not in self.inbox:
            return _fail(self._t("no_such_message"))
        del self.inbox[message_id]
        return _ok(self._t("deleted_message", id=message_id))

    def view_messages_between_users(self, sender_name, receiver_name):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        if sender_name not in self._users:
            return _fail(self._t("unknown_sender"))
        if receiver_name not in self._users:
            return _fail(self._t("unknown_receiver"))
        sid, rid = self._users[sender_name], self._users[receiver_name]
        found = [
            {"id": mid, "sender": sender_name, "receiver": receiver_name, "message": m["message"]}
            for mid, m in self.inbox.items()
            if m["sender_id"] == sid and m["receiver_id"] == rid
        ]
        if not found:
            return _fail(self._t("no_messages"))
        return {"status": True, "messages": found}

    def search_messages(self, user_name, keyword):
        # no login check (spec)
        if user_name not in self._users:
            return _fail(self._t("unknown_user"))
        uid = self._users[user_name]
        needle = keyword.lower()
        found = [
            {"id": mid, "sender_id": m["sender_id"], "receiver_id": m["receiver_id"], "message": m["message"]}
            for mid, m in self.inbox.items()
            if uid in (m["sender_id"], m["receiver_id"]) and needle in m["message"].lower()
        ]
        if not found:
            return _fail(self._t("no_keyword_messages"))
        return {"status": True, "messages": found}

    def get_all_message_times_with_ids(self):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        return {mid: m["time"] for mid, m in self.inbox.items()}

    def _extreme_id(self, later: bool) -> Any:
        best_id, best_time = None, None
        for mid, m in self.inbox.items():
            when = datetime.strptime(m["time"], "%Y-%m-%d")
            if best_time is None or (when > best_time if later else when < best_time):
                best_id, best_time = mid, when
        return best_id

    def get_latest_message_id(self):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        if not self.inbox:
            return _fail(self._t("inbox_empty"))
        mid = self._extreme_id(later=True)
        return _ok(self._t("latest_id", id=mid), message_id=mid)

    def get_earliest_message_id(self):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        if not self.inbox:
            return _fail(self._t("inbox_empty"))
        mid = self._extreme_id(later=False)
        return _ok(self._t("earliest_id", id=mid), message_id=mid)


class ReminderApi(BaseApi):
    """Reminders keyed by int 1..3 (capacity 6). Does not run the BaseApi constructor: the
    device flags exist only once the loader ran (the runner always runs it)."""

    graded = ("reminder_list",)

    def __init__(self, language: str, seed: SeedTexts):  # noqa: D107 - no super().__init__ on purpose
        self._lang = language
        self._capacity = 6
        self.reminder_list: dict[Any, dict[str, Any]] = {}
        for key, (rid, time) in REMINDER_LAYOUT.items():
            title, description = seed.reminders[key]
            self.reminder_list[key] = {
                "reminder_id": rid,
                "title": title,
                "description": description,
                "time": time,
                "notified": False,
            }
        self._counter = 3

    def view_reminder_by_title(self, title):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        for reminder in self.reminder_list.values():
            if reminder["title"] == title:
                return {"status": True, "reminder": reminder}
        return _fail(self._t("no_reminder_title", title=title))

    def add_reminder(self, title, description, time):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        if len(self.reminder_list) >= self._capacity:
            return _fail(self._t("reminders_full"))
        self._counter += 1
        self.reminder_list[self._counter] = {
            "reminder_id": self._counter,
            "title": title,
            "description": description,
            "time": time,
            "notified": False,
        }
        return _ok(self._t("reminder_added", title=title))

    def delete_reminder(self, reminder_id):
        if _is_false(self.logged_in):
            return _fail(self._t("not_logged_in"))
        if reminder_id not in self.reminder_list:
            return _fail(self._t("no_such_reminder"))
        del self.reminder_list[reminder_id]
        return _ok(self._t("reminder_deleted", id=reminder_id))

    def view_all_reminders(self):
        if not self.reminder_list:
            return _fail(self._t("no_reminders"))
        items = [
            {"title": r["title"], "description": r["description"], "time": r["time"], "notified": r["notified"]}
            for r in self.reminder_list.values()
        ]
        return {"status": True, "reminders": items}


class ReminderApiZh(ReminderApi):
    """The zh variant has two more methods."""

    def mark_as_notified(self, reminder_id):
        if reminder_id not in self.reminder_list:
            return _fail(self._t("no_such_reminder"))
        self.reminder_list[reminder_id]["notified"] = True
        return _ok(self._t("reminder_notified", id=reminder_id))

    def search_reminders(self, keyword):
        needle = keyword.lower()
        found = []
        for r in self.reminder_list.values():
            if needle in r["title"].lower() or needle in r["description"].lower():
                # upstream formats the stored time as a datetime; stored times are strings,
                # so any match raises (spec §5.7)
                time = r["time"]
                if not isinstance(time, datetime):
                    raise AttributeError(f"'{type(time).__name__}' object has no attribute 'strftime'")
                found.append({"title": r["title"], "description": r["description"], "time": time.strftime("%Y-%m-%d %H:%M")})
        if not found:
            return _fail(self._t("no_keyword_reminders"))
        return {"status": True, "reminders": found}


_FOOD_USERS = (
    ("Eve", "U100", "password123", 500.0),
    ("Frank", "U101", "password456", 300.0),
    ("Grace", "U102", "password789", 150.0),
    ("Helen", "U103", "password321", 800.0),
    ("Isaac", "U104", "password654", 400.0),
    ("Jack", "U105", "password654", 120.0),
)
#: (en name, zh name, id, service type, [(en product, zh product, price), ...])
_MERCHANTS = (
    ("Domino's", "达美乐", "M100", "Pizza", (("Margherita Pizza", "玛格丽特披萨", 68.0), ("Super Supreme Pizza", "超级至尊披萨", 88.0))),
    ("Rice Village Bibimbap", "米村拌饭", "M101", "Bibimbap", (("Stone Pot Bibimbap", "石锅拌饭", 35.0), ("Korean Beef Bibimbap", "韩式牛肉拌饭", 45.0))),
    ("Haidilao", "海底捞", "M102", "Hotpot", (("Beef Rolls", "牛肉卷", 68.0), ("Seafood Platter", "海鲜拼盘", 88.0))),
    ("Heytea", "喜茶", "M103", "Milk Tea", (("Cheese Milk Tea", "芝士奶茶", 25.0), ("Four Seasons Spring Milk Tea", "四季春奶茶", 22.0))),
    ("Hema Fresh", "盒马生鲜", "M104", "Fresh Grocery", (("Organic Vegetable Pack", "有机蔬菜包", 15.0), ("Fresh Gift Pack", "生鲜大礼包", 99.0))),
    ("Jiutian BBQ", "九田家烤肉", "M105", "BBQ", (("Korean Grilled Beef", "韩式烤牛肉", 128.0), ("Grilled Pork Belly", "烤五花肉", 78.0))),
)


class FoodPlatform(BaseApi):
    """Food delivery: users with balances, logged-in users, orders (spec §5.7)."""

    graded = ("users", "logged_in_users", "orders")

    def __init__(self, language: str, seed: SeedTexts):  # noqa: D107 - no super().__init__ on purpose
        self._lang = language
        zh = language == "zh"
        self.users: dict[Any, dict[str, Any]] = {
            name: {"user_id": uid, "password": pw, "balance": bal} for name, uid, pw, bal in _FOOD_USERS
        }
        self._merchants: dict[str, dict[str, Any]] = {
            (zh_name if zh else en_name): {
                "merchant_id": mid,
                "service_type": service,
                "menu": [{"product": (zp if zh else ep), "price": price} for ep, zp, price in menu],
            }
            for en_name, zh_name, mid, service, menu in _MERCHANTS
        }
        self.logged_in_users: list[Any] = []
        self.orders: list[dict[str, Any]] = []

    def _load(self, config: dict[str, Any]) -> None:
        super()._load(config)
        self.logged_in_users = config.get("logged_in_users", [])

    def login_food_platform(self, username, password):
        if _is_false(self.wifi):
            return _fail(self._t("food_wifi_off"))
        if username not in self.users:
            return _fail(self._t("unknown_user"))
        if self.users[username]["password"] != password:
            return _fail(self._t("bad_password"))
        if username in self.logged_in_users:
            return _fail(self._t("already_logged_in", name=username))
        self.logged_in_users.append(username)
        return _ok(self._t("food_logged_in", name=username))

    def view_logged_in_users(self):
        if not self.logged_in_users:
            return _fail(self._t("nobody_logged_in"))
        return {"status": True, "logged_in_users": self.logged_in_users}

    def check_balance(self, user_name):
        if user_name in self.users:
            return self.users[user_name]["balance"]
        return 0.0

    def _over_budget(self, total: float, balance: Any) -> bool:
        # en refuses a total above the balance, zh also a total equal to it (spec §5.7)
        return total >= balance if self._lang == "zh" else total > balance

    def add_food_delivery_order(self, username, merchant_name, items):
        if username not in self.logged_in_users:
            return _fail(self._t("food_not_logged_in", name=username))
        if merchant_name not in self._merchants:
            return _fail(self._t("unknown_merchant"))
        menu = self._merchants[merchant_name]["menu"]
        total = 0.0
        lines = []
        for item in items:
            product = item.get("product")
            quantity = item.get("quantity", 1)
            if not isinstance(quantity, int) or quantity <= 0:
                return _fail(self._t("bad_quantity", quantity=quantity, product=product))
            entry = next((p for p in menu if p["product"] == product), None)
            if entry is None:
                return _fail(self._t("unknown_product", merchant=merchant_name, product=product))
            total += entry["price"] * quantity
            lines.append({"product": product, "quantity": quantity, "price_per_unit": entry["price"]})
        if self._over_budget(total, self.users[username]["balance"]):
            return _fail(self._t("insufficient_balance"))
        self.users[username]["balance"] -= total
        self.orders.append({"user_name": username, "merchant_name": merchant_name, "items": lines, "total_price": total})
        return _ok(self._t("order_placed", merchant=merchant_name, total=total))

    def get_products(self, merchant_name):
        merchant = self._merchants.get(merchant_name)
        if merchant:
            return merchant["menu"]
        return _fail(self._t("unknown_merchant_named", merchant=merchant_name))

    def view_orders(self, user_name):
        mine = [o for o in self.orders if o["user_name"] == user_name]
        if not mine:
            return _fail(self._t("no_orders"))
        return {"status": True, "orders": mine}

    def _product_matches(self, needle: str, line: Any) -> bool:
        if self._lang == "zh":
            # zh tests the order line itself as text: a dict line raises (spec §5.7)
            if not isinstance(line, str):
                raise AttributeError(f"'{type(line).__name__}' object has no attribute 'lower'")
            return needle in line.lower()
        return needle in line["product"].lower()

    def search_orders(self, keyword):
        needle = keyword.lower()
        found = [
            o
            for o in self.orders
            if needle in o["merchant_name"].lower() or any(self._product_matches(needle, line) for line in o.get("items", []))
        ]
        if not found:
            return _fail(self._t("no_matching_orders"))
        return {"status": True, "orders": found}


def fresh_config(config: Any) -> dict[str, Any]:
    """A private deep copy of one class configuration (``{}`` for anything but a dict)."""
    return copy.deepcopy(config) if isinstance(config, dict) else {}
