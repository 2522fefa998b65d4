"""``python -m rs_lightning TOOL ...``: the same as the console script ``rs-lightning TOOL ...``
(``python -m rs_lightning train debug=quick`` trains)."""

from rs_lightning.app.console import main

if __name__ == "__main__":
    raise SystemExit(main())
