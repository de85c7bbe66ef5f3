"""Evaluating checkpoints outside the training job: ``factory eval`` (docs/architecture.md, "Evals")."""
