"""Train a risk-sensitive distributional agent: ``python train.py env=risky_transitions risk=cvar``.

The same command as ``rs-lightning train ...`` (:mod:`rs_lightning.app.commands.train`), kept so
that the repository's checkout trains as it always has: the configuration is ``conf/``, bad
input is one line with exit status 2, the outputs go under the current folder's ``outputs/``.
"""

import sys

from rs_lightning.app.commands.train import main

if __name__ == "__main__":
    sys.exit(main())
