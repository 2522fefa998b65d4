"""rs-lightning's Hydra sweeper for the benchmark: the basic sweeper without the jobs whose
agent the objective refuses (:mod:`.valid_pairs_sweeper`). ``hydra_plugins`` itself stays a
namespace package (no __init__.py there)."""
