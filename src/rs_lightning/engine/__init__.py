"""The training path: K members (seeds) x N environment copies as dimensions.

- :mod:`~rs_lightning.engine.learner`: the training loops (LightningModules): ``QLearning``
  from replay, ``OnPolicyLearning`` from rollouts; each ``training_step`` is the whole step,
  top to bottom;
- :mod:`~rs_lightning.engine.rollout`: one step of the env copies under a policy, with the
  objective's episode state (training and the evaluations share it);
- :mod:`~rs_lightning.engine.experience`: the collector (the copies, the behaviour policy it
  owns and its buffer), the buffer protocol and the Lightning datamodule;
- :mod:`~rs_lightning.engine.behaviour`: the behaviour policy (members, the objective's acting
  rule, exploration with one generator per member);
- :mod:`~rs_lightning.engine.replay`: the replay memory, n-step returns, the replay buffer;
- :mod:`~rs_lightning.engine.rollout_buffer`: rollouts, advantages, shuffled minibatches;
- :mod:`~rs_lightning.engine.build`: the objects a validated config describes, the Trainer;
- :mod:`~rs_lightning.engine.callbacks`, :mod:`~rs_lightning.engine.checkpoints`,
  :mod:`~rs_lightning.engine.resources`.

The engine knows no reports and no evaluation: those are callbacks registered from the top.
"""
