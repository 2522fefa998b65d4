"""docs/qr_dqn_kappa.py (the fixed points of QR-DQN's loss in docs/research/qr-dqn-kappa.md) against closed forms.

For the fair two-point law {0, 1} the minimiser of the quantile Huber loss at fraction tau is
known exactly: with kappa >= 1 every error lies in the quadratic part, so it is the
tau-expectile, tau itself; with kappa small (tau < 1/2) it lies in [0, kappa], where the slope
(1 - tau) theta - tau kappa vanishes at theta = tau kappa / (1 - tau), the quantile 0 as kappa
goes to 0.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tests.conftest import ROOT


def load_doc_script():
    spec = importlib.util.spec_from_file_location("qr_dqn_kappa", ROOT / "docs" / "qr_dqn_kappa.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FRACTIONS = torch.tensor([0.05, 0.1, 0.3, 0.45], dtype=torch.float64)
FAIR_COIN = torch.tensor([0.0, 1.0], dtype=torch.float64)


def test_large_kappa_gives_the_expectile():
    doc = load_doc_script()
    theta = doc.huber_quantiles(FAIR_COIN, FRACTIONS, kappa=1.0)
    assert torch.allclose(theta, FRACTIONS, atol=1e-9)


@pytest.mark.parametrize("kappa", [0.1, 0.01])
def test_small_kappa_tends_to_the_quantile(kappa):
    doc = load_doc_script()
    theta = doc.huber_quantiles(FAIR_COIN, FRACTIONS, kappa=kappa)
    assert torch.allclose(theta, FRACTIONS * kappa / (1 - FRACTIONS), atol=1e-9)
