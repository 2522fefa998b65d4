"""Exact references on the tabular worlds: the return laws of fixed policies, the
per-decision fixed points and the static optima (``exact``, ``exact_policies``,
``tabular_references``), and what a learned greedy policy attains against them
(``ground_truth``). The analysis and the tests use them; the environments know nothing of
them."""
