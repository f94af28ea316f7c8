"""Typed configuration for every group, validated once at start.

A run's config goes through three steps, each a module of its own:
- Hydra composes cfg/config.yaml from the defaults `register_configs` stores (hydra_store.py),
  with cfg/task/<Task>.yaml on top;
- `load_config` turns the composed mapping into a `Config` and checks every value (build.py);
  a bad value raises `ConfigError` naming the key, the value and what is allowed;
- `resolve` fills in what depends on the machine, the devices and the device's defaults, into a
  new config (resolve.py), and `announce` prints the settings line (announce.py).

The dataclasses (schema.py) hold every default; fields.py is what each key carries and checks;
algorithms.py is the registry of algorithms; reference.py renders docs/configuration.md.
Importing pql.config never imports torch.
"""

from pql.config.algorithms import ALGORITHMS, Algorithm
from pql.config.announce import announce
from pql.config.build import load_config, to_dict
from pql.config.fields import ConfigError, given
from pql.config.hydra_store import register_configs
from pql.config.resolve import Devices, Resolved, resolve
from pql.config.schema import (
    CHECKPOINT_AUTO,
    MPS_MODES,
    ROLE_DEVICE_KEYS,
    ROLE_NAMES,
    VIDEO_SECONDS,
    ActorConfig,
    Config,
    ImpalaConfig,
    NetConfig,
    OffPolicyConfig,
    PPOConfig,
    PQLConfig,
    PQLDConfig,
    ReplayConfig,
    RuntimeConfig,
    SACConfig,
    TaskConfig,
    WandbConfig,
)

__all__ = [
    "ALGORITHMS",
    "CHECKPOINT_AUTO",
    "given",
    "MPS_MODES",
    "ROLE_DEVICE_KEYS",
    "ROLE_NAMES",
    "VIDEO_SECONDS",
    "ActorConfig",
    "Algorithm",
    "Config",
    "ConfigError",
    "Devices",
    "ImpalaConfig",
    "NetConfig",
    "OffPolicyConfig",
    "PPOConfig",
    "PQLConfig",
    "PQLDConfig",
    "ReplayConfig",
    "Resolved",
    "RuntimeConfig",
    "SACConfig",
    "TaskConfig",
    "WandbConfig",
    "announce",
    "load_config",
    "register_configs",
    "resolve",
    "to_dict",
]
