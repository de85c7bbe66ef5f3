"""The FSDP2 trainer: model, parallelisation, train loop, checkpoints, evals, metrics."""
