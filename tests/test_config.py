"""Every bad config gives one line naming key, value and what is allowed, and exit code 2; the
composed defaults are the dataclasses' defaults."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from pql.checkpoint import CheckpointError
from pql.cli import preflight
from pql.config import (
    ALGORITHMS,
    Config,
    ConfigError,
    ImpalaConfig,
    OffPolicyConfig,
    PPOConfig,
    PQLConfig,
    PQLDConfig,
    SACConfig,
    TaskConfig,
    announce,
    load_config,
    register_configs,
    resolve,
)
from tasks import TASK_NAMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG_DIR = os.path.join(ROOT, "cfg")


def composed(overrides):
    register_configs()
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
    ("algo.policy_average=1.5", "algo.policy_average", "[0, 1]"),
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
    ("runtime.policy_publish_every=0", "runtime.policy_publish_every", ">= 1"),
    ("runtime.critic_publish_every=0", "runtime.critic_publish_every", ">= 1"),
    ("runtime.actor_pull_every=0", "runtime.actor_pull_every", ">= 1"),
    ("runtime.v_learner_pull_every=0", "runtime.v_learner_pull_every", ">= 1"),
    ("algo.warmup_steps=-1", "algo.warmup_steps", ">= 0"),
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


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algo.early_steps=300"], "algo.early_steps=300 is not allowed; expected 0 without algo.early_beta_av"),
        (
            ["algo=sac", "algo.early_beta_av=64"],
            "algo.early_beta_av=64 is not allowed; expected null with algo.early_steps=0",
        ),
    ],
)
def test_early_ratio_keys_come_together(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(composed(overrides))
    assert (
        load_config(composed(overrides[:-1] + ["algo.early_beta_av=64", "algo.early_steps=300"])).algo.early_steps
        == 300
    )


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["algo.gamma=2"], "algo.gamma=2"),
        (["algo.gama=0.9"], "algo.gama"),
        (["task=Walker"], "task='Walker'"),
        (["algo=foo"], "algo='foo' is not allowed; expected one of impala, ppo, pql, pql_d, sac"),
        (
            ["algo=sac", "algo.exploration=ape_x"],
            "algo.exploration='ape_x' is not allowed; expected an existing key with algo=sac",
        ),
        (["runtime.policy_sync_every=2"], "runtime.policy_sync_every='2' is not allowed; expected an existing key"),
        (["checkpoint=/nonexistent/checkpoint.pt"], "checkpoint not found: /nonexistent/checkpoint.pt"),
        (
            ["checkpoint=auto", "test=true"],
            "checkpoint='auto' is not allowed; expected a checkpoint's path with test=true",
        ),
        (["algo.beta_av=nan"], "algo.beta_av=nan is not allowed; expected an integer >= 1"),
        (["runtime.max_time_s=inf"], "runtime.max_time_s=inf is not allowed"),
        (
            ["replay.capacity=10", "task.num_envs=64", "algo.batch_size=256"],
            "replay.capacity=10 is not allowed; expected an integer >= 256: at least algo.batch_size (256) and "
            "task.num_envs (64",
        ),
        (
            ["algo=ppo", "algo.minibatches=100000"],
            "algo.minibatches=100000 is not allowed; expected at most algo.horizon * task.num_envs = 4096",
        ),
        (["algo.nstep=2000"], "algo.nstep=2000 is not allowed; expected an integer <= 1000 (the longest Ant episode)"),
        (["-m", "algo.gamma=0.9,1.5"], "algo.gamma=1.5 is not allowed; expected null or a number in (0, 1]"),
        (["algo.beta_pv=1,2"], "algo.beta_pv='1,2' is not allowed; expected one value (add -m to sweep"),
        (["algo.gamma=[0.9"], "algo.gamma='[0.9' is not allowed; expected a value in Hydra's override grammar"),
    ],
)
def test_every_bad_setting_is_found_before_the_run(argv, needle, tmp_path):
    with pytest.raises((ConfigError, CheckpointError)) as raised:
        preflight([*argv, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"], CFG_DIR)
    assert needle in str(raised.value) and "\n" not in str(raised.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["algo.gamma=2"], "pql: config error: algo.gamma=2"),
        (
            ["algo=sac", "algo.exploration=ape_x"],
            "algo.exploration='ape_x' is not allowed; expected an existing key with algo=sac",
        ),
        (["checkpoint=/nonexistent/checkpoint.pt"], "pql: checkpoint not found: /nonexistent/checkpoint.pt"),
        (["-m", "algo.gamma=0.9,1.5"], "algo.gamma=1.5 is not allowed; expected null or a number in (0, 1]"),
    ],
)
def test_cli_exits_2_with_one_line_and_writes_nothing(argv, needle, tmp_path):
    # The run (or sweep) directory is where Hydra would write: a bad setting must leave none.
    proc = subprocess.run(
        [
            sys.executable,
            "train.py",
            *argv,
            f"hydra.run.dir={tmp_path / 'run'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert os.listdir(tmp_path) == []


def numeric_keys(value, prefix=""):
    """(dotted key, type) of every int and float field of a config group, nested groups included."""
    import dataclasses
    import typing

    for f in dataclasses.fields(value):
        key, hint = f"{prefix}{f.name}", typing.get_type_hints(type(value))[f.name]
        inner = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if dataclasses.is_dataclass(getattr(value, f.name)):
            yield from numeric_keys(getattr(value, f.name), f"{key}.")
        elif inner[0] in (int, float) and hint is not bool:
            yield key


@pytest.mark.parametrize("algo", ["pql", "pql_d", "sac", "ppo", "impala"])
def test_every_numeric_key_rejects_nan_and_infinities(algo):
    base = composed([f"algo={algo}"])
    keys = [f"algo.{k}" for k in numeric_keys(ALGORITHMS[algo].config_class()())]
    keys += [k for k in numeric_keys(Config()) if not k.startswith("algo.")]
    assert len(keys) > 30
    for key in keys:
        for bad in (float("nan"), float("inf"), float("-inf")):
            raw = {**base, **{g: dict(v) for g, v in base.items() if isinstance(v, dict)}}
            group, name = key.split(".", 1) if "." in key else (None, key)
            target = raw if group is None else raw[group]
            *path, leaf = name.split(".")
            for part in path:
                target[part] = dict(target[part])
                target = target[part]
            target[leaf] = bad
            with pytest.raises(ConfigError, match=rf"{key}={bad}"):
                load_config(raw)


def test_defaults_validate():
    cfg = load_config(composed([]))
    assert cfg.task.name == "Ant" and cfg.algo.name == "pql"
    # β_a:v 1:16 on every device (docs/tuning.md); β_p:v the paper's 2.
    assert (cfg.algo.beta_av, cfg.algo.beta_pv) == (16, 2)


@pytest.mark.parametrize(
    "override, key, allowed",
    [
        ("runtime.mode=sequential", "runtime.mode", "process with an Isaac Gym task"),
        ("algo=ppo", "algo", "pql, pql_d, sac or impala with an Isaac Gym task"),
    ],
)
def test_isaacgym_needs_a_process_of_its_own_for_the_training_envs(override, key, allowed):
    with pytest.raises(ConfigError, match=rf"{key}=.*{allowed}"):
        load_config(composed(["task=isaacgym", "task.name=isaacgym/Ant", override]))


def test_a_costly_rerank_schedule_is_warned_about(capsys):
    cfg = load_config(
        composed(
            [
                "replay.kind=prioritized",
                "replay.priority_mode=rank",
                "replay.rerank_every=2",
                "replay.capacity=1000000",
                "runtime.device=cpu",
            ]
        )
    )
    announce(resolve(cfg))
    assert (
        "warning: replay.rerank_every=2 re-sorts all 1,000,000 items every 2 critic updates" in capsys.readouterr().out
    )


def plain(cfg) -> dict:
    """A config as the composed mapping writes it (lists, not tuples)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def with_task_defaults(algo):
    """The nulls load_config resolves from the (default) task, Ant: pql_d's support, its value
    range, the n-step returns' n, 3 for its 1,000-step episodes, γ = 0.99 and no mirror."""
    if isinstance(algo, OffPolicyConfig):
        algo = dataclasses.replace(algo, nstep=3, gamma=0.99, mirror=False)
    if isinstance(algo, PQLDConfig):
        return dataclasses.replace(algo, v_min=TaskConfig().value_min, v_max=TaskConfig().value_max)
    return algo


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_composed_defaults_are_the_dataclass_defaults(name):
    raw = composed([f"algo={name}"])
    raw["run_dir"] = Config().run_dir  # Hydra's run directory, the one composed value that is no default
    expected = Config(algo=ALGORITHMS[name].config_class()())
    assert raw == plain(expected)
    expected.algo = with_task_defaults(expected.algo)
    assert load_config(raw) == expected


def test_the_default_algorithm_is_the_dataclass_default():
    raw = composed([])
    assert raw["algo"] == plain(Config().algo) and raw["task"] == plain(TaskConfig())


@pytest.mark.parametrize("task", [*TASK_NAMES, "isaacgym"])
def test_task_files_restate_no_default(task):
    own = OmegaConf.to_container(OmegaConf.load(os.path.join(CFG_DIR, "task", f"{task}.yaml")))
    defaults = dataclasses.asdict(TaskConfig())
    # The CPU env count and the value range are each task's own choice, stated in its file even
    # where they equal the default.
    own_keys = ("name", "cpu_num_envs", "value_min", "value_max")
    assert {k: v for k, v in own.items() if v == defaults[k] and k not in own_keys} == {}
    if task != "isaacgym":
        assert set(own_keys) <= set(own)


def test_config_yaml_restates_no_default():
    own = OmegaConf.to_container(OmegaConf.load(os.path.join(CFG_DIR, "config.yaml")))
    assert sorted(own) == ["defaults", "hydra", "run_dir"]
    assert not os.path.exists(os.path.join(CFG_DIR, "algo"))  # the algo options come from the ConfigStore


@pytest.mark.parametrize(
    "task, support", [("Ant", (-100.0, 1000.0)), ("HumanoidStandup", (0.0, 50000.0)), ("Pusher", (-300.0, 0.0))]
)
def test_pql_d_support_is_the_tasks_value_range(task, support):
    algo = load_config(composed(["algo=pql_d", f"task={task}"])).algo
    assert isinstance(algo, PQLDConfig) and (algo.num_atoms, algo.v_min, algo.v_max) == (101, *support)
    assert algo.exploration == "mixed"  # and every key of pql
    algo = load_config(composed(["algo=pql_d", f"task={task}", "algo.v_min=-7", "algo.v_max=7"])).algo
    assert (algo.v_min, algo.v_max) == (-7.0, 7.0)


@pytest.mark.parametrize(
    "task, nstep", [("Reacher", 1), ("Pusher", 1), ("HalfCheetah", 3), ("Ant", 3), ("InvertedPendulum", 3)]
)
@pytest.mark.parametrize("algo", ["pql", "pql_d", "sac"])
def test_nstep_default_follows_the_episode_length(task, nstep, algo):
    assert load_config(composed([f"algo={algo}", f"task={task}"])).algo.nstep == nstep
    assert load_config(composed([f"algo={algo}", f"task={task}", "algo.nstep=2"])).algo.nstep == 2


@pytest.mark.parametrize(
    "task, gamma, mirror",
    [
        (["task=Anymal"], 0.97, True),
        (["task=Ant"], 0.99, False),
        (["task=dmc", "task.name=dmc/cheetah-run"], 0.99, False),
    ],
)
@pytest.mark.parametrize("algo", ["pql", "sac"])
def test_the_task_fills_the_discount_and_the_mirror_left_null(task, gamma, mirror, algo):
    cfg = load_config(composed([f"algo={algo}", *task])).algo
    assert (cfg.gamma, cfg.mirror) == (gamma, mirror)
    cfg = load_config(composed([f"algo={algo}", *task, "algo.gamma=0.9", "algo.mirror=false"])).algo
    assert (cfg.gamma, cfg.mirror) == (0.9, False)


def test_pql_d_support_scales_with_the_reward():
    algo = load_config(composed(["algo=pql_d", "task=Pusher", "algo.reward_scale=0.01"])).algo
    assert (algo.v_min, algo.v_max) == (-3.0, 0.0)
    algo = load_config(composed(["algo=pql_d", "algo.reward_scale=0.01", "algo.v_min=-7", "algo.v_max=7"])).algo
    assert (algo.v_min, algo.v_max) == (-7.0, 7.0)  # a support given by hand is taken as it is
    with pytest.raises(ConfigError, match=r"algo.reward_scale=0 is not allowed; expected a number > 0"):
        load_config(composed(["algo.reward_scale=0"]))


@pytest.mark.parametrize(
    "task, support",
    [("Ant", (-5.0, 5.0)), ("dmc/hopper-hop", (0.0, 5.0)), ("HumanoidStandup", (0.0, 5.0)), ("Pusher", (-5.0, 0.0))],
)
def test_a_return_scaled_critic_s_support_spans_the_signs_of_the_task_s_values(make_config, task, support):
    for value in ("categorical", "hl_gauss"):
        algo = make_config(["algo=sac", f"algo.value={value}", "algo.return_scaling=true", f"task={task}"]).algo
        assert (algo.v_min, algo.v_max, algo.num_atoms) == (*support, 101)
    algo = make_config(["algo=pql", "algo.return_scaling=true", "algo.return_bound=3", f"task={task}"]).algo
    assert (algo.v_min, algo.v_max) == tuple(3 / 5 * end for end in support)  # the scale's, for a scalar critic
    assert make_config(["algo=pql", f"task={task}"]).algo.v_min is None  # a scalar critic has no support


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algo.value=hl_gauss", "algo.v_min=1", "algo.v_max=5"], r"algo.v_min=1.0 is not allowed; expected a num"),
        (["algo.value=categorical", "algo.v_min=-5", "algo.v_max=-1"], r"algo.v_max=-1.0 is not allowed; expected a"),
        # A scalar critic's support is only its return scale's, checked here alone.
        (["algo.v_min=0", "algo.v_max=0"], r"algo.v_max=0.0 is not allowed; expected a number >= 0 and > algo.v_min"),
    ],
)
def test_a_return_scaled_support_must_hold_zero(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(composed(["algo.return_scaling=true", *overrides]))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["algo.net.kind=hyperspherical", "algo.net.critic_hidden=[64,32]"],
            r"algo.net.critic_hidden=\[64, 32\] is not allowed; expected one width repeated, one residual "
            r"block per entry, with algo.net.kind=hyperspherical",
        ),
        (
            ["algo=ppo", "algo.net.kind=batchnorm"],
            r"algo.net.kind='batchnorm' is not allowed; expected mlp with algo=ppo",
        ),
        (["algo.net.kind=resnet"], r"algo.net.kind='resnet' is not allowed; expected one of mlp, hyperspherical"),
        (["algo.value=categorical", "algo.v_min=2", "algo.v_max=1"], r"algo.v_max=1.0 is not allowed"),
        (["algo.noise_hold=-1"], r"algo.noise_hold=-1 is not allowed; expected an integer >= 0"),
        (
            ["algo=sac", "algo.target_entropy_std=0"],
            r"algo.target_entropy_std=0 is not allowed; expected null or a number > 0",
        ),
    ],
)
def test_the_learner_s_settings_are_checked(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(composed(overrides))


def test_each_algorithm_has_its_own_keys_only():
    assert "exploration" not in composed(["algo=sac"])["algo"]
    assert "target_entropy_std" not in composed(["algo=pql"])["algo"]
    assert "return_scaling" not in composed(["algo=ppo"])["algo"]
    assert isinstance(load_config(composed(["algo=sac"])).algo, SACConfig)
    with pytest.raises(ConfigError, match=r"algo.exploration='ape_x' is not allowed; expected one of the keys"):
        load_config({"algo": {"name": "sac", "exploration": "ape_x"}})


@pytest.mark.parametrize(
    "name, cls",
    [("pql", PQLConfig), ("pql_d", PQLDConfig), ("sac", SACConfig), ("ppo", PPOConfig), ("impala", ImpalaConfig)],
)
def test_load_config_picks_the_class_by_name(name, cls):
    algo = load_config({"algo": {"name": name}}).algo
    assert type(algo) is cls and algo == with_task_defaults(cls()) and algo.name == name


def test_off_policy_algorithms_share_the_off_policy_keys():
    assert all(issubclass(ALGORITHMS[n].config_class(), OffPolicyConfig) for n in ("pql", "pql_d", "sac"))
    assert not any(issubclass(ALGORITHMS[n].config_class(), OffPolicyConfig) for n in ("ppo", "impala"))


@pytest.mark.parametrize("name", ["ppo", "impala"])
def test_on_policy_nets_keep_their_own_defaults_under_a_partial_override(name):
    net = load_config({"algo": {"name": name, "net": {"actor_hidden": [32]}}}).algo.net
    assert (net.actor_hidden, net.critic_hidden, net.critic_layer_norm) == ((32,), (256, 128, 64), False)


def test_unknown_algorithm_names_the_registered_ones():
    with pytest.raises(
        ConfigError, match=r"algo.name='foo' is not allowed; expected one of pql, pql_d, sac, ppo, impala"
    ):
        load_config({"algo": {"name": "foo"}})


def test_bad_pql_d_support():
    with pytest.raises(
        ConfigError, match=r"algo.v_max=-200.0 is not allowed; expected a number > algo.v_min \(-100.0\)"
    ):
        load_config(composed(["algo=pql_d", "algo.v_max=-200"]))
    with pytest.raises(ConfigError, match=r"task.value_max=-200.0 is not allowed; expected a number > task.value_min"):
        load_config(composed(["task.value_max=-200"]))


def test_old_sync_keys_are_unknown():
    with pytest.raises(ConfigError, match=r"runtime.policy_sync_every='2' is not allowed; expected an existing key"):
        preflight(["runtime.policy_sync_every=2"], CFG_DIR)
    with pytest.raises(ConfigError, match=r"runtime.policy_sync_every=2 is not allowed; expected one of the keys"):
        load_config({"runtime": {"policy_sync_every": 2}})


def test_publish_and_pull_periods():
    runtime = load_config(
        composed(
            [
                "runtime.policy_publish_every=2",
                "runtime.critic_publish_every=3",
                "runtime.actor_pull_every=4",
                "runtime.v_learner_pull_every=5",
            ]
        )
    ).runtime
    assert (
        runtime.policy_publish_every,
        runtime.critic_publish_every,
        runtime.actor_pull_every,
        runtime.v_learner_pull_every,
    ) == (2, 3, 4, 5)
    defaults = load_config(composed([])).runtime
    assert (
        defaults.policy_publish_every,
        defaults.critic_publish_every,
        defaults.actor_pull_every,
        defaults.v_learner_pull_every,
    ) == (1, 1, 1, 1)


def test_warmup_steps_may_be_zero():
    assert load_config(composed(["algo.warmup_steps=0"])).algo.warmup_steps == 0


def test_a_sweep_over_algorithms_composes_each():
    preflight(["-m", "algo=pql,sac", "algo.gamma=0.9", "runtime.seed=1,2"], CFG_DIR)
    for name in ("pql", "sac"):
        assert load_config(composed([f"algo={name}", "algo.gamma=0.9"])).algo.name == name
    with pytest.raises(
        ConfigError, match=r"algo.exploration='ape_x' is not allowed; expected an existing key with algo=sac"
    ):
        preflight(["-m", "algo=pql,sac", "algo.exploration=ape_x"], CFG_DIR)


def test_unknown_group_option_lists_the_config_store_options():
    with pytest.raises(
        ConfigError,
        match=r"^config error: algo='foo' is not allowed; expected one of impala, ppo, pql, "
        r"pql_d, sac$",
    ):
        preflight(["algo=foo"], CFG_DIR)
    with pytest.raises(ConfigError, match=r"task='Walker'.*isaacgym/<Task>"):
        preflight(["task=Walker"], CFG_DIR)


def test_rules_are_registered_by_module_and_attribute():
    for algorithm in ALGORITHMS.values():
        assert algorithm.load_rules().__name__ == algorithm.rules.split(":")[1]
