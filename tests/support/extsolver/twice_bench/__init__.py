"""A benchmark from outside evalkit with a solver of its own: the model drafts an answer,
then is asked for its final answer with the draft in the conversation. The solver is
shipped to evalkit's Ray model workers, which import this package there (a test of the
plugin contract: ``tests/test_outside_solver.py``)."""

from evalkit.benchmarks.base import Benchmark, Solver, register
from evalkit.types import Request, Sample, SampleScore, Trajectory

QUESTIONS = {"fr": ("France", "Paris"), "jp": ("Japan", "Tokyo"), "pe": ("Peru", "Lima")}


class DraftThenFinal(Solver):
    """Two calls per sample: ``DRAFT`` the question, then ``FINAL`` with the draft kept."""

    async def solve(self, sample, request, agent, user):
        draft = await agent.generate(request)
        follow = [*request.messages, {"role": "assistant", "content": draft.text or ""},
                  {"role": "user", "content": f"FINAL {sample.id}: your final answer, the city only."}]
        final = await agent.generate(Request(sample.id, sample.subset, messages=follow))
        return Trajectory(final_output=final.text or "", data={"draft": draft.text})


@register
class Twice(Benchmark):
    """Exact match of the final answer (case and spaces ignored)."""

    name = "twice"

    def load(self):
        return [Sample(id=k, subset="all", data={"country": c, "capital": a}) for k, (c, a) in QUESTIONS.items()]

    def build(self, sample, shots):
        text = f"DRAFT {sample.id}: what is the capital of {sample.data['country']}?"
        return Request(sample.id, sample.subset, messages=[{"role": "user", "content": text}])

    def solver(self):
        return DraftThenFinal()

    def score(self, sample, output):
        return SampleScore(scores={"accuracy": float(output.strip().casefold() == sample.data["capital"].casefold())})

    def reference_output(self, sample):
        return sample.data["capital"]
