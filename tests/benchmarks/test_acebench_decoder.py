"""The strict normal decoder (spec §3.1) and its literal-only arithmetic."""

from __future__ import annotations

import pytest

from evalkit.benchmarks.acebench.decoder import DecodeError, decode_calls, delete_whitespace

REJECT = DecodeError

# spec §3.1 step 7: argument source -> decoded value (REJECT = wrong_output_format)
VALUE_TABLE = [
    ("'abc'", "abc"),
    ("5", 5),
    ("2.5", 2.5),
    ("True", True),
    ("None", None),
    ("b'x'", b"x"),
    ("'ab' 'cd'", "abcd"),  # implicit concatenation is one constant
    ("...", "..."),
    ("-5", -5),
    ("+5", -5),  # upstream quirk: every unary operator negates
    ("~1", -1),
    ("-True", -1),
    ("not True", "notTrue"),  # whitespace deletion makes it a name
    ("-'a'", REJECT),
    ("--5", REJECT),
    ("-(1+2)", REJECT),
    ("[1, 'a']", [1, "a"]),
    ("(1, 2)", (1, 2)),
    ("{'k': 1}", {"k": 1}),
    ("{'k': -1}", {"k": -1}),
    ("true", "true"),
    ("Eve", "Eve"),
    ("null", "null"),
    ("g(x=1)", {"g": {"x": 1}}),
    ("g()", {"g": {}}),
    ("g(1)", {"g": {}}),
    ("m.g(x=1)", {"m.g": {"x": 1}}),
    ("1+2", 3),
    ("'a'+'b'", "ab"),
    ("2**10", 1024),
    ("7//2", 3),
    ("7/2", 3.5),
    ("7%3", 1),
    ("1<<3", 8),
    ("6&3", 2),
    ("6|1", 7),
    ("6^3", 5),
    ("5>>1", 2),
    ("1+-2", -1),  # inside arithmetic a unary minus is a real minus
    ("[1]+[2]", [1, 2]),
    ("'a'*3", "aaa"),
    ("'%s-%s'%('a','b')", "a-b"),
    ("1/0", REJECT),
    ("x+1", REJECT),
    ("len('ab')+1", REJECT),  # evalkit never evaluates non-literal code (upstream eval gives 3)
    ("2**10**10", REJECT),  # too large to compute
    ("'a'*10**9", REJECT),
    ("x[0]", "x[0]"),
    ("x[1:2]", "x[1:2]"),
    ("x.y", REJECT),
    ("{1, 2}", REJECT),
    ("f'a'", REJECT),
    ("1<2", REJECT),
    ("(a)and(b)", REJECT),
    ("1 if a else 2", REJECT),
    ("lambda: 1", REJECT),
    ("{**k}", REJECT),
]


@pytest.mark.parametrize(("source", "expected"), VALUE_TABLE, ids=[s for s, _ in VALUE_TABLE])
def test_value_table(source, expected):
    text = f"[f(a={source})]"
    if expected is REJECT:
        with pytest.raises(DecodeError):
            decode_calls(text)
    else:
        decoded = decode_calls(text)
        assert decoded == [{"f": {"a": expected}}]
        assert type(decoded[0]["f"]["a"]) is type(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[f(a=1), g()]", [{"f": {"a": 1}}, {"g": {}}]),
        ("f(a=1),g()", [{"f": {"a": 1}}, {"g": {}}]),  # a tuple without brackets
        ("{f(a=1)}", [{"f": {"a": 1}}]),
        ("[]", []),
        ("[f(1, a=2)]", [{"f": {"a": 2}}]),  # positional arguments are dropped
        ("[f(**k)]", [{"f": {None: "k"}}]),
        ("[f(a='New York')]\n\n", [{"f": {"a": "NewYork"}}]),  # whitespace deleted everywhere
        ("[f(a='New\\x20York')]", [{"f": {"a": "New York"}}]),
    ],
)
def test_output_shapes_accepted(text, expected):
    assert decode_calls(text) == expected


@pytest.mark.parametrize(
    "text",
    ["f(a=1)", "Sure! [f(a=1)]", "```python\n[f(a=1)]\n```", '[{"name": "f", "arguments": {"a": 1}}]', "[1]", "[f(a=1), 2]", "", "[f(a=1)][g()]", "[f(a=1)"],
)
def test_output_shapes_rejected(text):
    with pytest.raises(DecodeError):
        decode_calls(text)


def test_whitespace_deletion_uses_str_split_semantics():
    assert delete_whitespace("a b\tc\nd\u3000e\xa0f") == "abcdef"


def test_model_text_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    payloads = [
        f"[f(a=__import__('os').system('touch {marker}')+1)]",
        f"[f(a=1+__import__('os').system('touch {marker}'))]",
        f"[f(a=[__import__('os').system('touch {marker}')][0]+1)]",
    ]
    for text in payloads:
        with pytest.raises(DecodeError):
            decode_calls(text)
    # nested calls are decoded as names, never called
    lam = f"[f(a=(lambda: __import__('os').system('touch {marker}'))())]"
    assert decode_calls(lam) == [{"f": {"a": {"": {}}}}]
    assert decode_calls(f"[f(a=__import__(name='os'))]") == [{"f": {"a": {"__import__": {"name": "os"}}}}]
    assert not marker.exists()


def test_decoder_never_raises_other_errors():
    for text in ["[" * 10000, "[f(a=" + "(" * 5000 + "1" + ")" * 5000 + ")]", "\x00", "[f(a=1)]\x00", "[f(a={[1]:2})]"]:
        with pytest.raises(DecodeError):
            decode_calls(text)
