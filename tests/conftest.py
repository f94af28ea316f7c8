"""Shared test helpers: compose a validated config the way train.py does."""
import os

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from pql.config import Config, load_config, register_configs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# cfg/config.yaml composes pql's defaults from Hydra's ConfigStore. Stored here, before any test
# runs, so that every test that composes pql's config (not only through compose_config) finds them.
register_configs()


def compose_config(overrides: list[str], run_dir) -> Config:
    """The validated Config that `python train.py <overrides>` would run, writing to run_dir."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=os.path.join(ROOT, "cfg"), version_base=None):
        raw = OmegaConf.to_container(compose("config", overrides=overrides), resolve=False)
    GlobalHydra.instance().clear()
    raw["run_dir"] = str(run_dir)
    return load_config(raw)


@pytest.fixture
def make_config(tmp_path):
    """make_config(overrides, run_dir=tmp_path) -> Config."""
    return lambda overrides, run_dir=tmp_path: compose_config(overrides, run_dir)
