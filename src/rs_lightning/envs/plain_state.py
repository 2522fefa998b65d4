"""A gymnasium environment's state as plain data (tensors, numbers, strings), never code.

A checkpoint is data a user may get from someone else, so it must not hold pickled objects
(unpickling can run any code). The state of an environment made by ``gymnasium.make`` lives
in the attributes of the environment and of each wrapper around it: CartPole's ``state``
array and ``steps_beyond_terminated``, the ``TimeLimit``'s ``_elapsed_steps``, the
generator ``_np_random`` and so on. :func:`capture_state` records, layer by layer, every
attribute holding plain data:

- ``None``, bools, ints, floats, strings;
- NumPy arrays and scalars of numbers (as tensors) or of text, tensors;
- lists, tuples and dicts of these;
- NumPy generators (their ``bit_generator.state``: a dict of ints and a name).

Attributes that are structure, rebuilt from the config when the environment is made, are
not recorded: the wrapped environment, spaces, the spec and metadata, functions and methods,
gymnasium's record of a wrapper's arguments. Anything else (a physics engine's world, an
open window) cannot be recorded as data: :class:`UncapturableState` names it, and the caller
falls back (:class:`~rs_lightning.envs.copies.GymCopies` restarts such episodes on resume).

:func:`restore_state` writes a record back into a freshly made environment of the same
config: only attributes the fresh environment has, of the same layer classes, and only
values decoded from the plain forms above.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec

# Attributes that describe how the environment was made, not where it is.
_STRUCTURE_NAMES = frozenset({"env", "spec", "_cached_spec", "metadata", "_metadata",
                              "render_mode", "_saved_kwargs"})
_PRIMITIVES = (type(None), bool, int, float, str)
_NUMBER_KINDS = "biufc"
_TEXT_KINDS = "SU"
_BIT_GENERATORS = {name: getattr(np.random, name)
                   for name in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")}


class UncapturableState(ValueError):
    """An environment attribute that is neither plain data nor structure."""


def _layers(env: gym.Env) -> list[Any]:
    """The environment's wrappers from the outside in, then the environment itself."""
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _is_structure(name: str, value: Any) -> bool:
    return (name in _STRUCTURE_NAMES
            or isinstance(value, (gym.Env, gym.spaces.Space, EnvSpec, type))
            or (callable(value) and not isinstance(value, np.random.Generator)))


def _state_names(layer: Any) -> list[str]:
    return [name for name, value in vars(layer).items() if not _is_structure(name, value)]


# Encoded forms: primitives as they are; everything else a tagged tuple, so that a tuple in
# the record is always a tag and never ambiguous.
def _encode(value: Any, where: str) -> Any:
    if type(value) in _PRIMITIVES:  # exactly: NumPy's float64 and str_ are subclasses
        return value
    if isinstance(value, np.random.Generator):  # MT19937's state holds an array: encoded too
        return ("generator", _encode(value.bit_generator.state, f"{where} state"))
    if isinstance(value, torch.Tensor):
        return ("tensor", value.detach().cpu().clone())
    if isinstance(value, np.ndarray) and value.dtype.kind in _NUMBER_KINDS:
        return ("array", torch.from_numpy(np.ascontiguousarray(value)).clone())
    if isinstance(value, np.ndarray) and value.dtype.kind in _TEXT_KINDS:
        text = [item.decode("latin-1") if isinstance(item, bytes) else item
                for item in value.reshape(-1).tolist()]
        return ("text_array", value.dtype.str, list(value.shape), text)
    if isinstance(value, np.generic) and value.dtype.kind in _NUMBER_KINDS:
        return ("scalar", torch.from_numpy(np.asarray(value)).clone())
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return (kind, [_encode(item, f"{where}[{i}]") for i, item in enumerate(value)])
    if isinstance(value, dict):
        return ("dict", [[_encode(key, f"{where} key"), _encode(item, f"{where}[{key!r}]")]
                         for key, item in value.items()])
    raise UncapturableState(f"{where} holds a {type(value).__module__}.{type(value).__qualname__}")


def _decode(value: Any) -> Any:
    if type(value) in _PRIMITIVES:
        return value
    if not (isinstance(value, tuple) and value and isinstance(value[0], str)):
        raise ValueError(f"not a recorded value: {type(value).__name__}")
    tag, *body = value
    if tag == "array" and isinstance(body[0], torch.Tensor):
        return body[0].numpy().copy()
    if tag == "scalar" and isinstance(body[0], torch.Tensor) and body[0].dim() == 0:
        return body[0].numpy()[()]
    if tag == "tensor" and isinstance(body[0], torch.Tensor):
        return body[0].clone()
    if tag == "text_array":
        dtype, shape, text = np.dtype(str(body[0])), [int(n) for n in body[1]], body[2]
        if dtype.kind not in _TEXT_KINDS or not all(isinstance(t, str) for t in text):
            raise ValueError("a text array of another type")
        items = [t.encode("latin-1") for t in text] if dtype.kind == "S" else text
        return np.array(items, dtype=dtype).reshape(shape)
    if tag in ("list", "tuple") and isinstance(body[0], list):
        items = [_decode(item) for item in body[0]]
        return items if tag == "list" else tuple(items)
    if tag == "dict" and isinstance(body[0], list):
        return {_decode(key): _decode(item) for key, item in body[0]}
    if tag == "generator":
        return _generator(_decode(body[0]))
    raise ValueError(f"not a recorded value: tag {tag!r}")


def _generator(state: Any) -> np.random.Generator:
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in _BIT_GENERATORS:
        raise ValueError(f"not a NumPy bit generator: {name!r}")
    bit_generator = _BIT_GENERATORS[name]()
    bit_generator.state = state  # NumPy checks the dict's fields and types
    return np.random.Generator(bit_generator)


def capture_state(env: gym.Env) -> list[dict[str, Any]]:
    """Every layer's class and plain attributes; UncapturableState if one holds anything
    else (the message names the layer, the attribute and its type)."""
    record = []
    for layer in _layers(env):
        name = type(layer).__qualname__
        attributes = {attr: _encode(getattr(layer, attr), f"{name}.{attr}")
                      for attr in _state_names(layer)}
        record.append({"class": name, "attributes": attributes})
    return record


def restore_state(env: gym.Env, record: Any) -> None:
    """Write a :func:`capture_state` record into ``env``, a freshly made environment of the
    same config; ValueError if the record is not one of this environment."""
    layers = _layers(env)
    if not isinstance(record, list) or len(record) != len(layers):
        raise ValueError("the recorded environment has another number of wrappers")
    for layer, recorded in zip(layers, record):
        name = type(layer).__qualname__
        if not isinstance(recorded, dict) or recorded.get("class") != name:
            raise ValueError(f"the recorded environment is not a {name}")
        attributes = recorded.get("attributes")
        if not isinstance(attributes, dict) or set(attributes) != set(_state_names(layer)):
            raise ValueError(f"the recorded {name} has other attributes than this one")
        for attr, value in attributes.items():
            setattr(layer, attr, _decode(value))
