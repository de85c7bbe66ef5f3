"""Experiments on the factory: sweeps, ablations and mixture search, trials scheduled by Ray Tune."""
