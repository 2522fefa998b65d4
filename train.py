"""Train a risk-sensitive distributional agent: ``python train.py env=risky_transitions risk=cvar``.

Configuration lives in conf/ (Hydra); the work is done by rs_lightning.train.run.
"""

import sys

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    from rs_lightning.errors import ConfigError
    from rs_lightning.train import run

    try:
        run(cfg)
    except ConfigError as error:
        print(f"Error in config: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
