"""What reads runs: the evaluations (the engine's rollout at epsilon 0), the frontier,
results tables, reports, plots and statistics. Nothing here calls training."""
