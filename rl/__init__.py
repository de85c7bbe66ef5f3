"""Reinforcement learning from code execution: the environment built from real repositories and
sandboxed rollouts against their own tests (docs/rl.md)."""
