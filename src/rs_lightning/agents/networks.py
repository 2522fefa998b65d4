"""The state torso every agent builds its networks on (the ``network=`` option).

Observations reach the agents flat, ``[..., obs_dim]`` (an image is flattened by
:mod:`rs_lightning.envs.gym_support`, which records its shape in ``Problem.obs_shape``), so the
agents, the replay memory and the stacked members all keep one form. What differs is the first
part of the network that reads them:

- ``mlp``: the flat observation goes straight into the agent's ``hidden_sizes`` layers (the
  network every agent had before this option; its parameters and their draw are unchanged);
- ``cnn``: the image part of the observation (the first ``prod(obs_shape)`` entries) is put
  back into ``[C, H, W]`` and read by a few convolutions (ReLU after each), whose flattened
  output, followed by whatever the observation carries after the image (a risk-conditioned
  agent's setting features), feeds the agent's ``hidden_sizes`` layers.

K stacked members (:mod:`rs_lightning.agents.members`): a convolution whose parameters carry
a leading member dimension runs as one grouped convolution (``groups=K``), member k's channels
in group k, as :class:`~rs_lightning.agents.base.Linear` runs a batched product.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rs_lightning.agents.base import MISSING, mlp
from rs_lightning.types import Problem

NETWORKS = ("mlp", "cnn")
LAYOUTS = ("channels_last", "channels_first")


@dataclass
class NetworkConfig:
    """The ``network`` section (values in ``conf/network/*.yaml``)."""

    name: str = MISSING  # mlp | cnn
    channels: list[int] = MISSING  # cnn: output channels of each conv
    kernel_size: int = MISSING  # cnn: square kernels
    stride: int = MISSING  # cnn
    layout: str = MISSING  # cnn: [H, W, C] (gymnasium, MinAtar) or [C, H, W]

    def check(self) -> None:
        """Raise ``ValueError("network.key: what is allowed")`` for values out of range."""
        if self.name not in NETWORKS:
            raise ValueError(f"network.name: must be one of {', '.join(NETWORKS)}, "
                             f"got {self.name!r}")
        if self.name == "mlp":
            if self.channels:
                raise ValueError(f"network.channels: the mlp reads no image, so it must be [], "
                                 f"got {list(self.channels)} (network=cnn for convolutions)")
            return
        if not self.channels or any(c <= 0 for c in self.channels):
            raise ValueError(f"network.channels: must be a non-empty list of positive channel "
                             f"counts, got {list(self.channels)}")
        for key in ("kernel_size", "stride"):
            if getattr(self, key) < 1:
                raise ValueError(f"network.{key}: must be a positive integer, "
                                 f"got {getattr(self, key)}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"network.layout: must be one of {', '.join(LAYOUTS)}, "
                             f"got {self.layout!r}")

    def check_problem(self, problem: Problem) -> None:
        """ValueError naming ``network`` when the observations do not suit the torso."""
        if self.name != "cnn":
            return
        if len(problem.obs_shape) not in (2, 3):
            raise ValueError(f"network: cnn reads image observations ([H, W, C], [C, H, W] or "
                             f"[H, W]), and this environment's are flat vectors of "
                             f"{problem.obs_dim} values; use network=mlp")
        _, height, width = image_chw(problem.obs_shape, self.layout)
        for _ in self.channels:
            height, width = conv_size(height, self), conv_size(width, self)
        if height < 1 or width < 1:
            count = len(self.channels)
            raise ValueError(f"network.kernel_size: {count} convolution{'s' * (count > 1)} of kernel "
                             f"{self.kernel_size} and stride {self.stride} leave nothing of a "
                             f"{list(problem.obs_shape)} image ({self.layout}); use fewer or "
                             "smaller ones")


def image_chw(shape: tuple[int, ...], layout: str) -> tuple[int, int, int]:
    """(C, H, W) of an observation of ``shape`` in ``layout`` ([H, W]: one channel)."""
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    if layout == "channels_last":
        return shape[2], shape[0], shape[1]
    return shape[0], shape[1], shape[2]


def conv_size(size: int, config: NetworkConfig) -> int:
    """One side of a convolution's output (no padding)."""
    return (size - config.kernel_size) // config.stride + 1


def conv2d(x: Tensor, weight: Tensor, bias: Tensor, stride: int) -> Tensor:
    """A convolution of images ``x[N, C, H, W]`` for one network (``weight[out, C, k, k]``),
    or of K stacked members (``weight[K, out, C, k, k]``, ``x[K, N, C, H, W]``, member k's
    images at k) as one grouped convolution -> ``[K, N, out, H', W']``."""
    if weight.dim() == 4:
        return F.conv2d(x, weight, bias, stride=stride)
    members, out = weight.shape[:2]
    n, channels, height, width = x.shape[1:]
    grouped = x.transpose(0, 1).reshape(n, members * channels, height, width)
    y = F.conv2d(grouped, weight.flatten(0, 1), bias.flatten(), stride=stride, groups=members)
    return y.view(n, members, out, *y.shape[-2:]).transpose(0, 1)


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` (no padding) that also runs K stacked members (see :func:`conv2d`)."""

    def forward(self, x: Tensor) -> Tensor:
        return conv2d(x, self.weight, self.bias, self.stride[0])


class ConvTorso(nn.Module):
    """Flat observations ``[..., obs_dim]`` (the image first, then any extra features) ->
    ``[..., features]``: the convolutions' flattened output, then the extra features."""

    def __init__(self, problem: Problem, config: NetworkConfig) -> None:
        super().__init__()
        self.layout = config.layout
        self.image_shape = tuple(problem.obs_shape)
        self.image_size = math.prod(self.image_shape)
        self.chw = image_chw(self.image_shape, config.layout)
        channels, height, width = self.chw
        layers = []
        for out in config.channels:
            layers.append(Conv2d(channels, out, config.kernel_size, stride=config.stride))
            channels, height, width = out, conv_size(height, config), conv_size(width, config)
        self.convs = nn.ModuleList(layers)
        self.features = channels * height * width + problem.obs_dim - self.image_size

    def forward(self, obs: Tensor) -> Tensor:
        stacked = self.convs[0].weight.dim() == 5
        keep = 1 if stacked else 0  # leading dimensions kept apart: the members
        lead = obs.shape[:-1]
        image = obs[..., :self.image_size]
        image = image.reshape(*lead[:keep], -1, *self.image_shape)
        if len(self.image_shape) == 2:
            image = image.unsqueeze(-3)
        elif self.layout == "channels_last":
            image = image.movedim(-1, -3)
        for conv in self.convs:
            image = F.relu(conv(image))
        features = image.reshape(*lead, -1)
        if obs.shape[-1] == self.image_size:
            return features
        return torch.cat([features, obs[..., self.image_size:].to(features.dtype)], dim=-1)


def state_network(problem: Problem, config: NetworkConfig | None, sizes: list[int],
                  activate_last: bool = False) -> nn.Module:
    """The network from flat observations through the torso of ``config`` and then linear
    layers of ``sizes`` (ReLU between them; after the last too if ``activate_last``)."""
    if config is None or config.name == "mlp":
        return mlp([problem.obs_dim, *sizes], activate_last=activate_last)
    config.check_problem(problem)
    torso = ConvTorso(problem, config)
    return nn.Sequential(torso, mlp([torso.features, *sizes], activate_last=activate_last))
