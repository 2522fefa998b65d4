"""Exact references on the tabular worlds, one engine with one API.

- :mod:`.policy_iteration`: the utility-greedy policy iteration of the per-decision
  criterion (fixed points, cycles, switch points), shared by every world;
- the laws of fixed policies, in the form that is exact for each kind of world:
  Gaussian mixtures on the paper's grid worlds (:mod:`.exact`, with their fixed points and
  static optima in :mod:`.exact_policies`), atom grids on small tabular models
  (:mod:`.tabular_references`, with the static optimum by dynamic programming);
- :mod:`.ground_truth`: ``exact_references(env_config, rho)``, the one entry the analysis
  and the objectives use, which gives the same keys on either kind of world.

The environments know nothing of this package."""
