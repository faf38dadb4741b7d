"""ACEBench category names and report groups (spec §1.2, §4.6).

Source: ACEBench/ACEBench ``category.py::ACE_DATA_CATEGORY`` (order of ``test_all``) plus the
SINGLE_TURN group that the leaderboard reports.
"""

from __future__ import annotations

NORMAL_CATEGORIES: tuple[str, ...] = (
    "normal_single_turn_single_function",
    "normal_single_turn_parallel_function",
    "normal_multi_turn_user_adjust",
    "normal_multi_turn_user_switch",
    "normal_similar_api",
    "normal_preference",
    "normal_atom_bool",
    "normal_atom_enum",
    "normal_atom_number",
    "normal_atom_list",
    "normal_atom_object_deep",
    "normal_atom_object_short",
)
SPECIAL_CATEGORIES: tuple[str, ...] = ("special_incomplete", "special_error_param", "special_irrelevant")
AGENT_CATEGORIES: tuple[str, ...] = ("agent_multi_step", "agent_multi_turn")

#: every category, in the canonical order of spec §1.2 (also the sample order of ``load``)
ALL_CATEGORIES: tuple[str, ...] = NORMAL_CATEGORIES + SPECIAL_CATEGORIES + AGENT_CATEGORIES
#: what runs when ``benchmark.subsets`` is not set: all 17 categories
DEFAULT_CATEGORIES: tuple[str, ...] = ALL_CATEGORIES

MULTI_TURN_CATEGORIES: tuple[str, ...] = ("normal_multi_turn_user_adjust", "normal_multi_turn_user_switch")

#: report groups: unweighted means of category accuracies (spec §4.6)
GROUPS: dict[str, tuple[str, ...]] = {
    "ATOM": tuple(c for c in NORMAL_CATEGORIES if c.startswith("normal_atom_")),
    "SINGLE_TURN": ("normal_single_turn_single_function", "normal_single_turn_parallel_function"),
    "MULTI_TURN": MULTI_TURN_CATEGORIES,
    "NORMAL": NORMAL_CATEGORIES,
    "SPECIAL": SPECIAL_CATEGORIES,
    "AGENT": AGENT_CATEGORIES,
}

#: OVERALL weights of the upstream leaderboard (spec §4.6; they sum to 1.0001)
OVERALL_WEIGHTS: dict[str, float] = {"NORMAL": 0.578, "SPECIAL": 0.2676, "AGENT": 0.1545}

LANGUAGES: tuple[str, ...] = ("en", "zh")


#: names ``benchmark.subsets`` may give instead of categories (case-insensitive): the three
#: families (``normal``, ``special``, ``agent``, as EvalScope's ``subset_list`` takes them),
#: the report groups of :data:`GROUPS` (``ATOM``, ``SINGLE_TURN``, ``MULTI_TURN``, ...) and
#: ``test_all`` (every category, as EvalScope and upstream's ``--category test_all`` take it)
SUBSET_FAMILIES: dict[str, tuple[str, ...]] = {
    **{name.lower(): members for name, members in GROUPS.items()},
    "test_all": ALL_CATEGORIES,
}


def expand_subsets(names: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """``(categories, expansion)``: ``names`` with every family or group name
    (:data:`SUBSET_FAMILIES`, any case) replaced by its categories, in the order given,
    each category once; ``expansion`` maps each name that was expanded, as given, to its
    categories. Category names (and unknown names, left for the caller to refuse) pass
    through as they are."""
    out: list[str] = []
    expansion: dict[str, list[str]] = {}
    for name in names:
        members = SUBSET_FAMILIES.get(name.lower()) if isinstance(name, str) and name not in ALL_CATEGORIES else None
        if members is None:
            if name not in out:
                out.append(name)
            continue
        expansion[name] = list(members)
        out.extend(c for c in members if c not in out)
    return out, expansion


def family(category: str) -> str:
    """``normal`` | ``special`` | ``agent`` for a category name."""
    return category.split("_", 1)[0]
