"""Initial texts the simulators take from the benchmark's own data (spec §5.7).

The six initial inbox messages and the three initial reminders occur verbatim in the agent
ground-truth files; they are read from there at run time (never typed into code). The
structured fields (ids, senders, times) are the spec's tables and are used to find them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import DataError
from evalkit.untrusted import read_objects

#: spec §5.7 MessageApi table: id -> (sender_id, receiver_id, time)
INBOX_LAYOUT: dict[int, tuple[str, str, str]] = {
    1: ("USR100", "USR101", "2024-06-09"),
    2: ("USR101", "USR102", "2024-03-09"),
    3: ("USR102", "USR103", "2023-12-05"),
    4: ("USR103", "USR102", "2024-09-09"),
    5: ("USR104", "USR105", "2024-06-06"),
    6: ("USR105", "USR104", "2024-01-15"),
}
#: spec §5.7 ReminderApi table: key -> (reminder_id, time)
REMINDER_LAYOUT: dict[int, tuple[int, str]] = {
    1: (1001, "2024-07-15 09:30"),
    2: (1002, "2024-07-17 11:00"),
    3: (1003, "2024-07-16 11:00"),
}


@dataclass(frozen=True)
class SeedTexts:
    """Initial inbox message texts (by id) and reminder (title, description) (by key)."""

    inbox: dict[int, str] = field(default_factory=dict)
    reminders: dict[int, tuple[str, str]] = field(default_factory=dict)


def extract_seed(ground_truths: list[Any], where: str = "agent ground truth") -> SeedTexts:
    """Find the initial texts in a list of agent ``ground_truth`` values.

    An inbox entry counts when its key, sender, receiver and time match the layout; a
    reminder when its key and ``reminder_id``/``time`` match. The most frequent text wins.
    """
    inbox: dict[int, Counter] = {k: Counter() for k in INBOX_LAYOUT}
    reminders: dict[int, Counter] = {k: Counter() for k in REMINDER_LAYOUT}
    for gt in ground_truths:
        for entry in gt if isinstance(gt, list) else []:
            if not isinstance(entry, dict):
                continue
            for attrs in entry.values():
                if not isinstance(attrs, dict):
                    continue
                box = attrs.get("inbox")
                if isinstance(box, dict):
                    for key, msg in box.items():
                        k = int(key) if str(key).isdigit() else None
                        if k in INBOX_LAYOUT and isinstance(msg, dict) and isinstance(msg.get("message"), str):
                            if (msg.get("sender_id"), msg.get("receiver_id"), msg.get("time")) == INBOX_LAYOUT[k]:
                                inbox[k][msg["message"]] += 1
                rems = attrs.get("reminder_list")
                if isinstance(rems, dict):
                    for key, rem in rems.items():
                        k = int(key) if str(key).isdigit() else None
                        if k in REMINDER_LAYOUT and isinstance(rem, dict):
                            if (rem.get("reminder_id"), rem.get("time")) == REMINDER_LAYOUT[k]:
                                title, desc = rem.get("title"), rem.get("description")
                                if isinstance(title, str) and isinstance(desc, str):
                                    reminders[k][(title, desc)] += 1
    missing = [f"inbox {k}" for k, c in inbox.items() if not c] + [f"reminder {k}" for k, c in reminders.items() if not c]
    if missing:
        raise DataError(f"{where}: initial simulator texts not found ({', '.join(missing)})")
    return SeedTexts(
        inbox={k: c.most_common(1)[0][0] for k, c in inbox.items()},
        reminders={k: c.most_common(1)[0][0] for k, c in reminders.items()},
    )


def load_seed(answer_files: list[Path]) -> SeedTexts:
    """:func:`extract_seed` over the JSONL answer files of the agent categories of one language."""
    gts = []
    for path in answer_files:
        for _, record in read_objects(path):
            gts.append(record.get("ground_truth"))
    return extract_seed(gts, where=", ".join(str(p) for p in answer_files))
