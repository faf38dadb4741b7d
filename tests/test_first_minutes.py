"""A newcomer's first minutes (issue 12, item 9): what the console says while things start."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd


# ------------------------------------------------------------------------------------------
# what is starting is said on the console (and in evalkit.log once it is open)
# ------------------------------------------------------------------------------------------
def test_the_console_says_what_is_starting(fake_openai, ray_address, acebench_dir, tmp_path):
    """A network model on a running Ray cluster: one ``evalkit:`` line before joining it and
    one before the model workers start; the workers' line is in evalkit.log as well."""
    fake_openai.set_plan({"default": {"content": "[]"}})
    root = tmp_path / "out"
    proc = subprocess.run(
        evalkit_cmd(*base_overrides(root, acebench_dir), "model=openai_compatible", "model.provider_model=openai/fake",
                    f"backend.api_base={fake_openai.api_base}", f"runner.address={ray_address}", "runner.num_workers=2",
                    "benchmark.subsets=[normal_atom_bool]", "run.limit=2"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("evalkit: ")]
    assert said == [f"evalkit: joining the Ray cluster at {ray_address}…", "evalkit: starting 2 model workers (Ray actors)…"]
    (run_dir,) = (root / "runs" / "acebench" / "openai_compatible").iterdir()
    assert "INFO evalkit.status: starting 2 model workers (Ray actors)…" in (run_dir / "evalkit.log").read_text()
