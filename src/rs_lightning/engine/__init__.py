"""The one training path: K members (seeds) x N environment copies as dimensions.

- :mod:`~rs_lightning.engine.behaviour`: epsilon-greedy on the utility, one generator per member;
- :mod:`~rs_lightning.engine.experience`: the env copies, the replay memory and the stream of
  batches between them (the Lightning datamodule);
- :mod:`~rs_lightning.engine.learner`: the Q-learning loop (the LightningModule);
- :mod:`~rs_lightning.engine.build`: the objects a validated config describes, the Trainer;
- :mod:`~rs_lightning.engine.callbacks`, :mod:`~rs_lightning.engine.checkpoints`.

The engine knows no reports and no evaluation: those are callbacks registered from the top.
"""
