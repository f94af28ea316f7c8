"""Every bad config gives one line naming key, value and what is allowed, and exit code 2."""
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from pql.config import ConfigError, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG_DIR = os.path.join(ROOT, "cfg")


def composed(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CFG_DIR, version_base=None):
        cfg = compose("config", overrides=overrides)
    GlobalHydra.instance().clear()
    raw = OmegaConf.to_container(cfg, resolve=False)
    raw["run_dir"] = "/tmp/unused"
    return raw


BAD = [
    ("algo.gamma=1.5", "algo.gamma", "(0, 1]"),
    ("algo.gamma=abc", "algo.gamma", "(0, 1]"),
    ("algo.nstep=0", "algo.nstep", ">= 1"),
    ("algo.tau=0", "algo.tau", "(0, 1]"),
    ("algo.beta_av=0", "algo.beta_av", ">= 1"),
    ("algo.beta_pv=1.5", "algo.beta_pv", ">= 1"),
    ("algo.batch_size=-8", "algo.batch_size", "> 0"),
    ("algo.critic_lr=-0.001", "algo.critic_lr", "> 0"),
    ("algo.exploration=boltzmann", "algo.exploration", "mixed, ape_x"),
    ("algo.noise_std_max=0.01", "algo.noise_std_max", ">= algo.noise_std_min"),
    ("algo.net.actor_hidden=[0,256]", "algo.net.actor_hidden", "positive layer widths"),
    ("task.num_envs=0", "task.num_envs", "> 0"),
    ("task.backend=physx", "task.backend", "auto, mujoco, mjwarp"),
    ("task.name=Walker", "task.name", "InvertedPendulum"),
    ("replay.kind=fifo", "replay.kind", "uniform, prioritized"),
    ("replay.capacity=0", "replay.capacity", "> 0"),
    ("replay.priority_beta0=1.5", "replay.priority_beta0", "[0, 1]"),
    ("replay.actor_priorities=true", "replay.actor_priorities", "replay.kind=prioritized"),
    ("replay.rerank_every=0", "replay.rerank_every", ">= 1"),
    ("replay.rerank_every=10", "replay.rerank_every", "replay.priority_mode=rank"),
    ("actor.precision=fp8", "actor.precision", "fp32, bf16, int8"),
    ("runtime.mode=threads", "runtime.mode", "process, sequential"),
    ("runtime.device=tpu", "runtime.device", "auto, cpu, cuda"),
    ("runtime.max_env_steps=0", "runtime.max_env_steps", "> 0"),
    ("runtime.max_lag=0", "runtime.max_lag", ">= 1"),
    ("wandb.mode=cloud", "wandb.mode", "online, offline"),
    ("wandb.activate=maybe", "wandb.activate", "true or false"),
    ("test=true", "test", "checkpoint=PATH"),
]


@pytest.mark.parametrize("override,key,allowed", BAD, ids=[b[0] for b in BAD])
def test_bad_value_names_key_value_and_allowed(override, key, allowed, capsys):
    from train import run

    with pytest.raises(SystemExit) as exit_info:
        run(composed([override]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert key in err and allowed in err, err
    assert override.split("=", 1)[1].strip("[]").split(",")[0] in err, err


def test_bad_impala_truncation_levels():
    with pytest.raises(ConfigError, match="algo.c_bar.*rho_bar >= c_bar"):
        load_config(composed(["algo=impala", "algo.rho_bar=0.5", "algo.c_bar=1.0"]))


@pytest.mark.parametrize("argv,needle", [
    (["algo.gamma=2"], "algo.gamma=2"),
    (["algo.gama=0.9"], "algo.gama"),
    (["task=Walker"], "task='Walker'"),
    (["checkpoint=/nonexistent/checkpoint.pt"], "checkpoint not found: /nonexistent/checkpoint.pt"),
])
def test_cli_exits_2_with_one_line(argv, needle):
    proc = subprocess.run([sys.executable, "train.py", *argv, "hydra.run.dir=/tmp/pql-test-bad-config"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_defaults_validate():
    cfg = load_config(composed([]))
    assert cfg.task.name == "Ant" and cfg.algo.name == "pql"
    assert (cfg.algo.beta_av, cfg.algo.beta_pv) == (8, 2)


@pytest.mark.parametrize("override, key, allowed", [
    ("runtime.mode=sequential", "runtime.mode", "process with an Isaac Gym task"),
    ("algo=ppo", "algo", "pql, pql_d, sac or impala with an Isaac Gym task"),
])
def test_isaacgym_needs_a_process_of_its_own_for_the_training_envs(override, key, allowed):
    with pytest.raises(ConfigError, match=rf"{key}=.*{allowed}"):
        load_config(composed(["task=isaacgym", "task.name=isaacgym/Ant", override]))


def test_a_costly_rerank_schedule_is_warned_about(capsys):
    from pql.config import apply_device_defaults

    cfg = load_config(composed(["replay.kind=prioritized", "replay.priority_mode=rank", "replay.rerank_every=2",
                                "replay.capacity=1000000", "runtime.device=cpu"]))
    apply_device_defaults(cfg)
    assert "warning: replay.rerank_every=2 re-sorts all 1,000,000 items every 2 critic updates" in capsys.readouterr().out
