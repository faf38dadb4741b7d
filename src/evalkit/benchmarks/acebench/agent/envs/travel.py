"""Travel simulator (spec §5.7): users, flights, reservations.

Only ``users`` and ``reservations`` are graded. Flights are private. The documented quirks
are kept because they decide the graded state: res_4 refers to a flight that does not
exist, cancelling refunds but never removes the reservation, a non cash/bank payment
method makes every modification charge a silent no-op, and unknown levels/cabins/flights
raise where upstream raises.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from evalkit.benchmarks.acebench.agent.envs.seed import SeedTexts
from evalkit.benchmarks.acebench.agent.envs.texts import text

_CITIES = {
    "Beijing": "北京", "Shanghai": "上海", "Nanjing": "南京", "Shenzhen": "深圳",
    "Xiamen": "厦门", "Chengdu": "成都", "Fuzhou": "福州",
}  # fmt: skip
_CABINS = {"en": ("Economy Class", "Business Class"), "zh": ("经济舱", "商务舱")}
#: free bags by membership level: (economy, business)
_FREE_BAGS = {"regular": (1, 2), "silver": (2, 3), "gold": (3, 3)}
_BAG_FEE = 50
_NOW = datetime(2024, 7, 14, 6, 0, 0)
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
#: flight_no, origin, destination, depart, arrive, seats, economy, business
_FLIGHTS = (
    ("CA1234", "Beijing", "Shanghai", "2024-07-15 08:00:00", "2024-07-15 10:30:00", 5, 1200, 3000),
    ("MU5678", "Shanghai", "Beijing", "2024-07-16 09:00:00", "2024-07-16 11:30:00", 3, 1900, 3000),
    ("CZ4321", "Shanghai", "Beijing", "2024-07-16 20:00:00", "2024-07-16 22:00:00", 8, 2500, 4000),
    ("CZ4352", "Shanghai", "Beijing", "2024-07-17 20:00:00", "2024-07-17 22:00:00", 8, 1600, 2500),
    ("MU3561", "Beijing", "Nanjing", "2024-07-18 08:00:00", "2024-07-18 10:00:00", 8, 1500, 4000),
    ("MU1566", "Beijing", "Nanjing", "2024-07-18 20:00:00", "2024-07-18 22:00:00", 8, 1500, 4000),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-17 20:30:00", "2024-07-17 22:00:00", 8, 1500, 2500),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-18 12:30:00", "2024-07-18 15:00:00", 8, 1500, 2500),
    ("MH1765", "Xiamen", "Chengdu", "2024-07-17 12:30:00", "2024-07-17 15:00:00", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Xiamen", "2024-07-18 18:30:00", "2024-07-18 21:00:00", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Fuzhou", "2024-07-16 18:30:00", "2024-07-16 21:00:00", 8, 1500, 2500),
)
#: reservation_id, user_id, flight_no, cabin index (0 economy, 1 business), origin, destination
_RESERVATIONS = (
    ("res_1", "user1", "CA1234", 0, "Beijing", "Shanghai"),
    ("res_2", "user1", "MU5678", 1, "Shanghai", "Beijing"),
    ("res_3", "user2", "MH1765", 1, "Xiamen", "Chengdu"),
    ("res_4", "user2", "MU2616", 1, "Chengdu", "Xiamen"),  # no such flight (upstream data)
)
_USERS = (
    ("user1", "Eve", "password123", 2000.0, 50000.0, "regular"),
    ("user2", "Frank", "password456", 8000.0, 8000.0, "silver"),
    ("user3", "Grace", "password789", 1000.0, 5000.0, "gold"),
)


class Travel:
    """Flight booking simulator, en/zh by city and cabin names."""

    graded = ("users", "reservations")

    def __init__(self, language: str, seed: SeedTexts):
        self._lang = language
        zh = language == "zh"
        city = (lambda c: _CITIES[c]) if zh else (lambda c: c)
        self._economy, self._business = _CABINS["zh" if zh else "en"]
        self.users: dict[Any, dict[str, Any]] = {
            uid: {"user_name": name, "password": pw, "cash_balance": cash, "bank_balance": bank, "membership_level": level}
            for uid, name, pw, cash, bank, level in _USERS
        }
        self._flights: list[dict[str, Any]] = [
            {
                "flight_no": no, "origin": city(o), "destination": city(d), "depart_time": dep,
                "arrival_time": arr, "status": "available", "seats_available": seats,
                "economy_price": eco, "business_price": bus,
            }
            for no, o, d, dep, arr, seats, eco, bus in _FLIGHTS
        ]  # fmt: skip
        self.reservations: list[dict[str, Any]] = [
            {
                "reservation_id": rid, "user_id": uid, "flight_no": no, "payment_method": "bank",
                "cabin": (self._economy, self._business)[cabin], "baggage": 1,
                "origin": city(o), "destination": city(d),
            }
            for rid, uid, no, cabin, o, d in _RESERVATIONS
        ]  # fmt: skip

    def _load(self, config: dict[str, Any]) -> None:
        """Travel ignores configuration (spec §5.1)."""

    def _t(self, key: str, **fields: Any) -> str:
        return text(self._lang, key, **fields)

    def _free_table(self) -> dict[str, dict[str, int]]:
        return {level: {self._economy: e, self._business: b} for level, (e, b) in _FREE_BAGS.items()}

    def _first_flight(self, flight_no: Any, available_only: bool = False) -> dict[str, Any] | None:
        for f in self._flights:
            if f["flight_no"] == flight_no and (not available_only or f["status"] == "available"):
                return f
        return None

    def _cabin_price(self, flight: dict[str, Any], cabin: Any) -> Any:
        return flight["economy_price"] if cabin == self._economy else flight["business_price"]

    # ---- queries ---------------------------------------------------------------------------
    def get_flight_details(self, origin=None, destination=None):
        flights = self._flights
        if origin:
            flights = [f for f in flights if f["origin"] == origin]
        if destination:
            flights = [f for f in flights if f["destination"] == destination]
        if not flights:
            return self._t("no_direct_flights")
        return [dict(f) for f in flights]

    def get_user_details(self, user_id, password):
        user = self.users.get(user_id)
        if user and user["password"] == password:
            return {k: v for k, v in user.items() if k != "password"}
        return {"status": "error", "message": self._t("bad_credentials")}

    def get_reservation_details(self, reservation_id=None, user_id=None):
        if reservation_id:
            found = [r for r in self.reservations if r["reservation_id"] == reservation_id]
        elif user_id:
            found = [r for r in self.reservations if r["user_id"] == user_id]
        else:
            return {"status": "error", "message": self._t("need_reservation_or_user")}
        return [{**r, "flight_info": self._first_flight(r["flight_no"])} for r in found]

    def authenticate_user(self, user_id, password):
        user = self.users.get(user_id)
        if user and user["password"] == password:
            return user
        # never falsy: callers go on with this dict and fail on its missing fields
        return {"status": "error", "message": self._t("bad_credentials")}

    def get_baggage_allowance(self, membership_level, cabin_class):
        return self._free_table().get(membership_level, {}).get(cabin_class, 0)

    def find_transfer_flights(self, origin_city, transfer_city, destination_city):
        first = [f for f in self._flights if f["origin"] == origin_city and f["destination"] == transfer_city and f["status"] == "available"]
        second = [f for f in self._flights if f["origin"] == transfer_city and f["destination"] == destination_city and f["status"] == "available"]
        pairs = []
        for a in first:
            arrival = datetime.strptime(a["arrival_time"], _TIME_FORMAT)
            for b in second:
                if arrival < datetime.strptime(b["depart_time"], _TIME_FORMAT):
                    pairs.append({"first_leg": a, "second_leg": b})
        return pairs if pairs else self._t("no_transfer_flights")

    def calculate_baggage_fee(self, membership_level, cabin_class, baggage_count):
        free = self._free_table()[membership_level][cabin_class]  # unknown level/cabin raises
        return max(baggage_count - free, 0) * _BAG_FEE

    def update_balance(self, user, payment_method, amount):
        if payment_method in ("cash", "bank"):
            key = f"{payment_method}_balance"
            if user[key] + amount < 0:
                return False
            user[key] += amount
        return True

    # ---- bookings --------------------------------------------------------------------------
    def reserve_flight(self, user_id, password, flight_no, cabin, payment_method, baggage_count):
        user = self.authenticate_user(user_id, password)
        if not user:
            return self._t("auth_failed")
        flight = self._first_flight(flight_no, available_only=True)
        if flight is None:
            raise TypeError("'NoneType' object is not subscriptable")
        total = self._cabin_price(flight, cabin)
        total += self.calculate_baggage_fee(user["membership_level"], cabin, baggage_count)
        if payment_method not in ["cash", "bank"]:
            return self._t("invalid_payment")
        account = self.users.get(user_id)
        key = f"{payment_method}_balance"
        if total > account[key]:
            return self._t("cash_insufficient" if payment_method == "cash" else "bank_insufficient")
        account[key] -= total
        flight["seats_available"] -= 1
        reservation_id = f"res_{len(self.reservations) + 1}"
        self.reservations.append(
            {
                "reservation_id": reservation_id,
                "user_id": user_id,
                "flight_no": flight_no,
                "payment_method": payment_method,
                "cabin": cabin,
                "baggage": baggage_count,
            }
        )
        return self._t("booked", id=reservation_id, total=total)

    def modify_flight(self, user_id, reservation_id, new_flight_no=None, new_cabin=None, add_baggage=0, new_payment_method=None):
        reservation = next(
            (r for r in self.reservations if r["reservation_id"] == reservation_id and r["user_id"] == user_id), None
        )
        if not reservation:
            return self._t("no_reservation_match")
        current = self._first_flight(reservation["flight_no"])
        if not current:
            return self._t("no_flight_info")
        method = new_payment_method if new_payment_method else reservation["payment_method"]
        user = self.users[user_id]
        if not user:
            return self._t("no_user_info")
        notes = []
        if new_flight_no and new_flight_no != reservation["flight_no"]:
            new_flight = self._first_flight(new_flight_no)
            if new_flight and new_flight["origin"] == current["origin"] and new_flight["destination"] == current["destination"]:
                reservation["flight_no"] = new_flight_no
                notes.append(self._t("flight_changed"))
            else:
                return self._t("flight_change_failed")
        if new_cabin and new_cabin != reservation.get("cabin"):
            difference = self.calculate_price_difference(current, reservation["cabin"], new_cabin)
            reservation["cabin"] = new_cabin
            if difference > 0:
                if self.update_balance(user, method, -difference):
                    notes.append(self._t("cabin_paid", amount=difference))
                else:
                    notes.append(self._t("cabin_unpaid"))
            elif difference < 0:
                self.update_balance(user, method, -difference)
                notes.append(self._t("cabin_refunded", amount=-difference))
        if add_baggage > 0:
            free = self.get_baggage_allowance(user["membership_level"], reservation["cabin"])
            total_bags = reservation.get("baggage", 0) + add_baggage
            cost = max(0, total_bags - free) * _BAG_FEE
            if cost > 0:
                if self.update_balance(user, method, -cost):
                    notes.append(self._t("baggage_paid", amount=cost))
                else:
                    notes.append(self._t("baggage_unpaid"))
            reservation["baggage"] = total_bags
        if not notes:
            notes.append(self._t("no_extra_fee"))
        return " ".join(notes)

    def cancel_reservation(self, user_id, reservation_id, reason):
        user = self.users.get(user_id, None)
        if not user:
            return self._t("invalid_user")
        reservation = next(
            (r for r in self.reservations if r["reservation_id"] == reservation_id and r["user_id"] == user_id), None
        )
        if not reservation:
            return self._t("invalid_reservation")
        flight = self._first_flight(reservation["flight_no"])
        if not flight:
            return self._t("no_flight_info")
        departure = datetime.strptime(flight["depart_time"], _TIME_FORMAT)
        if _NOW > departure:
            return self._t("flight_used")
        price = self._cabin_price(flight, reservation["cabin"])
        airline_reason = "航空公司取消航班" if self._lang == "zh" else "The airline has canceled the flight."
        # the reservation stays in the list (upstream never removes it)
        if reason == airline_reason:
            self.process_refund(user, price)
            return self._t("airline_cancelled", amount=price)
        if departure - _NOW > timedelta(days=1):
            self.process_refund(user, price)
            return self._t("free_cancel", amount=price)
        fee = price * 0.1
        self.process_refund(user, price - fee)
        return self._t("fee_cancel", fee=fee, amount=price - fee)

    def process_refund(self, user, amount):
        user["cash_balance"] += amount
        user["user_name"]  # upstream reports the name; a dict without it raises  # noqa: B018

    def calculate_price_difference(self, flight, old_cabin, new_cabin):
        prices = {self._economy: flight["economy_price"], self._business: flight["business_price"]}
        return prices.get(new_cabin, 0) - prices.get(old_cabin, 0)
