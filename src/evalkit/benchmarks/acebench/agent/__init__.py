"""ACEBench agent categories (agent_multi_step, agent_multi_turn): simulators, call dispatcher,
rollout loops, end-state scoring and the scripted reference (spec §3.3, §4.4, §5, §6.3)."""
