# ---- README, --help and console plurals --------------------------------------------------
def test_readme_says_how_to_start_the_fake_server_its_judge_recipe_uses():
    """The team-judge recipe needs ``OUR_JUDGE_URL``; the README used the fake OpenAI server
    (tests/support/fake_openai.py) without saying how to start it. Its passage gives the
    command, in the script's own argument order, a plan that is valid JSON and a verdict, and
    the URL on the same port."""
    import json
    import re

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    judge = readme[readme.index("<!-- journey: team-judge -->"): readme.index("<!-- journey: plugin -->")]
    start = re.search(r"^python tests/support/fake_openai\.py (\S+) (\d+) (\S+) &$", judge, re.M)
    assert start, "no command that starts the fake server beside the judge recipe"
    assert (REPO_ROOT / "tests" / "support" / "fake_openai.py").is_file()
    plan_line = re.search(rf"^echo '(.*)' > {re.escape(start.group(3))}$", judge, re.M)
    plan = json.loads(plan_line.group(1))  # bash keeps single-quoted text as it is
    assert json.loads(plan["default"]["content"]) == {"score": 4}
    assert f"export OUR_JUDGE_URL=http://127.0.0.1:{start.group(2)}/v1" in judge
    from tests.support import fake_openai

    assert "PORT_FILE [PORT [PLAN_FILE]]" in fake_openai.main.__doc__ and "PORT_FILE [PORT [PLAN_FILE]]" in judge
