"""The rollout loops of the agent categories (spec §5.4 multi-step, §5.5 multi-turn).

:class:`AceBenchSolver` is shipped to the engine's workers: it holds only plain data (the
template texts and the initial simulator texts read from the data) and builds a fresh
:class:`~evalkit.benchmarks.acebench.agent.envs.Environment` for every rollout. Model calls
go through ``await model.generate(Request(...))`` with empty ``params`` (the engine fills
generation parameters, caching and retries); a :class:`~evalkit.models.base.ModelCallError`
propagates unchanged.
"""

from __future__ import annotations

from typing import Any

from evalkit.benchmarks.acebench.agent.envs import Environment, SeedTexts
from evalkit.benchmarks.acebench.agent.dispatch import (
    NUDGE,
    Undecodable,
    decode_message,
    apply_calls,
    multi_turn_error_observation,
    observation,
    routes_to_executor,
)
from evalkit.benchmarks.acebench.categories import family
from evalkit.benchmarks.base import Generate, Solver
from evalkit.types import Generator, Request, Sample, Trajectory

FINISH = "finish conversation"


def remove_prefix(text: str) -> str:
    """One leading ``user:`` or ``agent:`` removed (what the simulator is shown)."""
    for prefix in ("user:", "agent:"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def is_finished(message: Any) -> bool:
    """``finish conversation`` as a substring of text, or as an element of a list observation."""
    try:
        return FINISH in message
    except TypeError:
        return False


def multi_step_messages(templates: dict[str, str], record: dict[str, Any], transcript: str) -> list[dict[str, str]]:
    """System + user message of a multi-step agent turn (the system template has no field)."""
    user = templates["agent_user"].format(functions=str(record["function"]), history=transcript)
    return [{"role": "system", "content": templates["agent_system"]}, {"role": "user", "content": user}]


def multi_turn_agent_system(templates: dict[str, str], involved: list[str]) -> str:
    """Multi-turn agent system prompt: template + travel policy + base policy (no separator)."""
    system = templates["agent_system"]
    if "Travel" in involved:
        system += templates["travel_policy"]
    if "BaseApi" in involved:
        system += templates["base_policy"]
    return system


def multi_turn_messages(templates: dict[str, str], record: dict[str, Any], transcript: str) -> list[dict[str, str]]:
    user = templates["agent_user"].format(functions=str(record["function"]), history=transcript)
    system = multi_turn_agent_system(templates, list(record.get("involved_classes") or []))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def simulator_opening(templates: dict[str, str], record: dict[str, Any]) -> list[dict[str, str]]:
    """The simulator chat before its first reply: system prompt with the instruction, opening line."""
    involved = list(record.get("involved_classes") or [])
    system = templates["sim_base"] if "BaseApi" in involved else templates["sim_travel"]
    return [
        {"role": "system", "content": system.format(instruction=record["question"])},
        {"role": "user", "content": templates["sim_opening"]},
    ]


def first_agent_messages(templates: dict[str, str], category: str, record: dict[str, Any]) -> list[dict[str, str]]:
    """The first agent-turn prompt (identity of an agent sample). Multi-turn: the simulator's
    first reply is not known before the rollout, so the history is empty."""
    if category == "agent_multi_step":
        return multi_step_messages(templates, record, "user:" + str(record["question"]) + "\n")
    return multi_turn_messages(templates, record, "")


async def _ask(model: Any, sample: Sample, messages: list[dict[str, str]]) -> str:
    completion = await model.generate(Request(sample_id=sample.id, subset=sample.subset, messages=[dict(m) for m in messages]))
    text = completion.text
    return text if isinstance(text, str) else ""


class AceBenchSolver(Solver):
    """ACEBench's solver: agent_multi_step / agent_multi_turn samples are rollouts (the
    loops below); every other category is one :class:`~evalkit.benchmarks.base.Generate`.

    ``templates``: ``{(category, language): {role: text}}`` (see
    :func:`evalkit.benchmarks.acebench.prompts.agent_template_keys`); ``seeds``: initial
    simulator texts per language; ``max_dialog_turns``: loop iterations (default 40).
    """

    def __init__(
        self,
        templates: dict[tuple[str, str], dict[str, str]],
        seeds: dict[str, SeedTexts],
        max_dialog_turns: int = 40,
    ):
        self.templates = templates
        self.seeds = seeds
        self.max_dialog_turns = max_dialog_turns

    def environment(self, language: str, record: dict[str, Any]) -> Environment:
        return Environment(language, list(record.get("involved_classes") or []), record.get("initial_config") or {}, self.seeds[language])

    async def solve(self, sample: Sample, request: Request, agent: Generator, user: Generator | None) -> Trajectory:
        if family(sample.subset) != "agent":
            return await Generate().solve(sample, request, agent, user)
        return await self.run(sample, agent, user)

    async def run(self, sample: Sample, agent: Any, user: Any | None) -> Trajectory:
        """One rollout of an agent sample (§5.4 multi-step, §5.5 multi-turn)."""
        category = sample.subset
        if category == "agent_multi_step":
            return await self.run_multi_step(sample, agent)
        if category == "agent_multi_turn":
            if user is None:
                raise ValueError(f"{sample.id}: agent_multi_turn needs a user simulator model")
            return await self.run_multi_turn(sample, agent, user)
        raise ValueError(f"{sample.id}: {category!r} is not an agent category")

    # ---- §5.4 ----------------------------------------------------------------------------------
    async def run_multi_step(self, sample: Sample, agent: Any) -> Trajectory:
        language, record = sample.data["language"], sample.data["prompt"]
        templates = self.templates[("agent_multi_step", language)]
        env = self.environment(language, record)
        question = record["question"]
        messages: list[dict[str, Any]] = [{"role": "user", "recipient": "agent", "content": question}]
        raw: list[Any] = [question]  # message values as upstream holds them (text or observation list)
        transcript = ""
        trace: list[str] = []
        recorded = False
        for i in range(self.max_dialog_turns):
            last = messages[-1]
            if i == 0 or last["role"] == "execution":
                prefix = "user:" if last["role"] == "user" else "execution result:"
                transcript += prefix + str(raw[-1]) + "\n"
                reply = await _ask(agent, sample, multi_step_messages(templates, record, transcript))
                message: dict[str, Any] = {"role": "agent", "recipient": "execution", "content": reply}
                value: Any = reply
            else:
                text = last["content"]
                trace.append(text)
                try:
                    calls = decode_message(text, strict=True)
                except Undecodable as exc:
                    value = NUDGE
                    message = {"role": "execution", "recipient": "agent", "content": NUDGE, "decoded": False, "detail": str(exc)}
                else:
                    recorded = True
                    done = apply_calls(env, calls, abort_on_error=False)
                    value = observation(done.results)
                    message = {
                        "role": "execution",
                        "recipient": "agent",
                        "content": str(value),
                        "decoded": True,
                        "calls": [c.to_dict() for c in calls],
                        "observation": value,
                    }
            messages.append(message)
            raw.append(value)
            if i > 1 and is_finished(value):
                break
        return self._trajectory(sample, env, messages, trace, recorded)

    # ---- §5.5 ----------------------------------------------------------------------------------
    async def run_multi_turn(self, sample: Sample, agent: Any, user: Any) -> Trajectory:
        language, record = sample.data["language"], sample.data["prompt"]
        templates = self.templates[("agent_multi_turn", language)]
        env = self.environment(language, record)
        simulator = simulator_opening(templates, record)
        opening = await _ask(user, sample, simulator)
        simulator.append({"role": "system", "content": opening})
        messages: list[dict[str, Any]] = [{"role": "user", "recipient": "agent", "content": opening}]
        raw: list[Any] = [opening]
        transcript = ""
        trace: list[str] = []
        recorded = False
        prefixes = {"user": "user:", "agent": "agent:", "execution": "execution:"}
        for i in range(self.max_dialog_turns):
            last = messages[-1]
            transcript += prefixes[last["role"]] + str(raw[-1]) + "\n"
            if last["recipient"] == "user":
                simulator.append({"role": "user", "content": remove_prefix(last["content"])})
                reply = await _ask(user, sample, simulator)
                simulator.append({"role": "system", "content": reply})
                message: dict[str, Any] = {"role": "user", "recipient": "agent", "content": reply}
                value: Any = reply
            elif last["recipient"] == "agent":
                reply = await _ask(agent, sample, multi_turn_messages(templates, record, transcript))
                recipient = "execution" if routes_to_executor(reply) else "user"
                message = {"role": "agent", "recipient": recipient, "content": reply}
                value = reply
            else:
                text = last["content"]
                trace.append(text)
                calls = decode_message(text, strict=False)  # decodable: routing checked it
                done = apply_calls(env, calls, abort_on_error=True)
                message = {"role": "execution", "recipient": "agent", "calls": [c.to_dict() for c in calls]}
                if done.error is not None:
                    value = multi_turn_error_observation()
                    message["error"] = f"{type(done.error).__name__}: {done.error}"
                else:
                    recorded = True
                    value = observation(done.results)
                message.update(content=str(value), observation=value)
            messages.append(message)
            raw.append(value)
            if i > 1 and is_finished(value):
                break
        return self._trajectory(sample, env, messages, trace, recorded)

    @staticmethod
    def _trajectory(sample: Sample, env: Environment, messages: list[dict[str, Any]], trace: list[str], recorded: bool) -> Trajectory:
        end_state = env.snapshot() if recorded else []
        return Trajectory(
            messages=messages,
            final_output=str(messages[-1]["content"]) if messages else "",
            data={
                "end_state": end_state,
                "process_trace": trace,
                "recorded": recorded,
                "language": sample.data["language"],
                "category": sample.subset,
            },
        )
