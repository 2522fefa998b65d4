"""rs-lightning's Hydra launcher for Ray (hydra/launcher=ray). ``hydra_plugins`` itself must
stay a namespace package (no __init__.py there): Hydra finds plugins of every distribution in it."""
