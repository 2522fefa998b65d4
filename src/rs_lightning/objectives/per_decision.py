"""The paper's objective: at every state, the action maximising U[Z(s, a)] of the return
from that state on, U = alpha E + (1 - alpha) R_rho; the same rule picks the Bellman
target's next action (Théate & Ernst, section 4)."""

from __future__ import annotations

from rs_lightning.objectives.base import Objective, register_objective


@register_objective("per_decision")
class PerDecision(Objective):
    """argmax_a U[Z(s, a)] for acting and for the target action."""

    def acting_rule(self, obs, state, network):
        return obs, self.utility.greedy

    def prepare_batch(self, transitions, state):
        return transitions, self.utility.greedy
