"""The one training path: K members (seeds) x N environment copies as dimensions.

- :mod:`~rs_lightning.engine.learner`: the Q-learning loop (the LightningModule); its
  ``training_step`` is the whole step, top to bottom;
- :mod:`~rs_lightning.engine.rollout`: one step of the env copies under a policy, with the
  objective's episode state (training and the evaluations share it);
- :mod:`~rs_lightning.engine.experience`: the collector (the copies, the replay memory and
  the update ratio between them) and the Lightning datamodule;
- :mod:`~rs_lightning.engine.behaviour`: epsilon-greedy, one generator per member;
- :mod:`~rs_lightning.engine.replay`: the replay memory and n-step returns;
- :mod:`~rs_lightning.engine.build`: the objects a validated config describes, the Trainer;
- :mod:`~rs_lightning.engine.callbacks`, :mod:`~rs_lightning.engine.checkpoints`,
  :mod:`~rs_lightning.engine.resources`.

The engine knows no reports and no evaluation: those are callbacks registered from the top.
"""
