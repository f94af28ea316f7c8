"""Command-line handling that runs before Hydra composes a job (and before torch is imported).

Hydra rejects an override of a key that does not exist with a multi-line message and exit
code 1, and it creates the run directory before the job sees its settings; pql promises one line
naming the key, the value and what is allowed, exit code 2, and nothing written, for every bad
config. So `preflight` composes and validates every job here first. `usage` is pql's --help.

`task=isaacgym/<Task>`, `task=dmc/<domain>-<task>`, `task=gym:<EnvId>` and `task=<module>:<factory>`
are not files under cfg/task/: `expand_task_forms` turns each into its group option plus `task.name`, and
`import_isaacgym_first` loads Isaac Gym before anything imports torch. `preflight` also checks
what can be checked of such a task without making its envs (the id is registered, the factory
imports), so that an env refused leaves no run directory. This module imports neither torch nor
hydra at import time.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
import textwrap
from typing import cast

from pql.config import CHECKPOINT_AUTO, ROLE_DEVICE_KEYS, Config, ConfigError

ISAACGYM_OPTION = "isaacgym"  # cfg/task/isaacgym.yaml
ISAACGYM_PREFIX = ISAACGYM_OPTION + "/"  # as in tasks.make("isaacgym/Ant", ...)
GYM_OPTION = "gym"  # cfg/task/gym.yaml
GYM_PREFIX = GYM_OPTION + ":"  # as in tasks.make("gym:Pendulum-v1", ...)
FACTORY_OPTION = "factory"  # cfg/task/factory.yaml: <module>:<factory>
DMC_OPTION = "dmc"  # cfg/task/dmc.yaml
DMC_PREFIX = DMC_OPTION + "/"  # as in tasks.make("dmc/cheetah-run", ...)
KWARGS_KEY = "task.kwargs."
# What each of those options stands for in a message or --help.
FORM_OF_OPTION = {
    ISAACGYM_OPTION: "isaacgym/<Task>",
    GYM_OPTION: "gym:<EnvId>",
    FACTORY_OPTION: "<module>:<factory>",
    DMC_OPTION: "dmc/<domain>-<task>",
}


def _task_option(choice: str) -> str | None:
    """The cfg/task/ option that a task choice not under cfg/task/ composes with, or None for a file's name."""
    if choice.startswith(ISAACGYM_PREFIX):
        return ISAACGYM_OPTION
    if choice.startswith(DMC_PREFIX):
        return DMC_OPTION
    if choice.startswith(GYM_PREFIX):
        return GYM_OPTION
    return FACTORY_OPTION if ":" in choice else None


def expand_task_forms(argv: list[str]) -> list[str]:
    """argv as Hydra can compose it: `task=isaacgym/<Task>`, `task=gym:<EnvId>` and
    `task=<module>:<factory>` (or a sweep of one form, `task=gym:A,gym:B`) written as the group
    option plus task.name (`task=gym task.name=gym:<EnvId>`), and `task.kwargs.<name>=<value>`,
    a key the config does not have until it is given, as Hydra's add-or-override
    `++task.kwargs.<name>=<value>`; other arguments unchanged. Raises ConfigError for a sweep
    that mixes forms."""
    out = []
    for arg in argv:
        if arg.startswith(KWARGS_KEY):
            out.append("++" + arg)
            continue
        if not arg.startswith("task="):
            out.append(arg)
            continue
        choices = arg[len("task=") :].split(",")
        options = {_task_option(c) for c in choices}
        if options == {None}:
            out.append(arg)
            continue
        if len(options) > 1:
            raise ConfigError(
                "task",
                arg[len("task=") :],
                "choices of one form in one sweep (pql's tasks, dmc/, gym:, <module>: or isaacgym/)",
            )
        out += [f"task={options.pop()}", f"task.name={','.join(choices)}"]
    return out


def wants_isaacgym(argv: list[str]) -> bool:
    """Whether argv picks an Isaac Gym task, as typed or as expand_task_forms wrote it."""
    return any(arg.startswith((f"task={ISAACGYM_OPTION}", f"task.name={ISAACGYM_PREFIX}")) for arg in argv)


def import_isaacgym_first(argv: list[str]) -> None:
    """Import isaacgym if argv picks an Isaac Gym task: it refuses to load once torch is imported.

    Call it before anything imports torch. If the import fails, tasks.make imports it again
    when it builds the envs and turns the failure into a one-line TaskError.
    """
    if not wants_isaacgym(argv):
        return
    with contextlib.suppress(ImportError):  # reported by tasks.make, in one line, when it builds the envs
        import isaacgym  # noqa: F401


def quiet_replica(argv: list[str]) -> list[str]:
    """argv for this process: under torchrun, a replica of rank > 0 writes nothing (rank 0
    writes the run directory), so Hydra gets no config copy or log file of its own there, nor,
    unless one is given (rank 0's, where checkpoint=auto looks), a run directory (Hydra's
    default, named by the time, would be a second, near-empty one)."""
    from pql.runtime.distributed import Replicas  # imports torch: only when called

    if Replicas.from_env().lead:
        return argv
    named = any(arg.startswith("hydra.run.dir=") for arg in argv)
    return [arg for arg in argv if not arg.startswith("hydra.output_subdir=")] + [
        *([] if named else ["hydra.run.dir=."]),
        "hydra.output_subdir=null",
        "hydra/job_logging=disabled",
        "hydra/hydra_logging=disabled",
    ]


def _overrides(argv: list[str]) -> list[tuple[str, str]]:
    """The plain `key=value` overrides (not flags, `+`/`~` edits or hydra's own keys)."""
    out = []
    for arg in argv:
        if arg.startswith(("-", "+", "~", "hydra/")) or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if not key.startswith("hydra."):
            out.append((key, value))
    return out


def _yaml_options(group_dir: str) -> set[str]:
    """The options a folder of the config gives its group: its YAML files' names."""
    return {f[: -len(".yaml")] for f in os.listdir(group_dir) if f.endswith(".yaml")}


def _group_options(key: str, config_dir: str) -> list[str] | None:
    """The options of config group `key`: YAML files in cfg/<key>/ and ConfigStore nodes
    (pql.config.register_configs); None if `key` is no group."""
    from hydra.core.config_store import ConfigStore

    options, found = set(), False
    group_dir = os.path.join(config_dir, key)
    if os.path.isdir(group_dir):
        options |= _yaml_options(group_dir)
        found = True
    with contextlib.suppress(OSError):  # ConfigStore.list: `key` is no group there
        options |= {o[: -len(".yaml")] for o in ConfigStore.instance().list(key) if o.endswith(".yaml")}
        found = True
    return sorted(options) if found else None


def _jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The overrides of each job a command launches: one job without -m/--multirun, every
    combination of the sweeps with it (as Hydra's basic sweeper forms them). Raises ConfigError
    for a sweep without -m and for an override Hydra cannot parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser, choices = OverridesParser.create(), []
    for arg in overrides:
        key, _, value = arg.partition("=")
        try:
            override = parser.parse_override(arg)
        except HydraException as e:
            raise ConfigError(key, value, f"a value in Hydra's override grammar ({str(e).splitlines()[0]})") from e
        if not override.is_sweep_override():
            choices.append([arg])
        elif not multirun:
            raise ConfigError(key, value, "one value (add -m to sweep over several; [a,b] is a list)")
        elif not override.is_discrete_sweep():
            raise ConfigError(key, value, "a list of values to sweep (a,b,c), choice(...) or range(...)")
        else:
            choices.append([f"{override.get_key_element()}={choice}" for choice in override.sweep_string_iterator()])
    return [list(job) for job in itertools.product(*choices)]


def _check_keys(job: list[str], tree: dict, groups: dict[str, list[str]]) -> None:
    """Raise ConfigError for an override of a key the composed config `tree` does not have
    (`groups`: the config group keys, whose overrides pick options rather than set values)."""
    picked = " ".join(f"{key}={value}" for key, value in _overrides(job) if key in groups)
    picked = f" with {picked}" if picked else ""
    for key, value in _overrides(job):
        if key in groups:
            continue
        node, parts = tree, key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parts[:i]) or "the top level"
                known = ", ".join(sorted(node)) if isinstance(node, dict) else "none (not a mapping)"
                raise ConfigError(key, value, f"an existing key{picked}; keys under {where}: {known}")
            node = node[part]


def _check_run_dir(key: str, path: str) -> None:
    """Raise ConfigError unless this user can create `path` (Hydra's run or sweep directory) or
    write into it. The directory itself is left to Hydra: only a probe is made and removed in
    its deepest existing ancestor."""
    path = os.path.abspath(path)
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(key, path, f"a directory ({existing} is a file)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".pql-probe-", dir=existing))
    except OSError as e:
        raise ConfigError(key, path, f"a directory this user can create and write ({existing}: {e.strerror})") from e


def _compose(config_dir: str, config_name: str, overrides: list[str]):
    """The config a job with these overrides runs, Hydra's own node included."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose(config_name, overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def preflight(argv: list[str], config_dir: str, config_name: str = "config") -> list:
    """Check everything a job's settings can get wrong before Hydra creates a run directory, so
    that a bad setting leaves nothing behind: unknown keys and group options, every value of
    every job of a sweep (load_config, then the device's defaults and sizes), the checkpoint to
    resume (with checkpoint=auto, the run directory's, if there is one: a sweep's jobs check it
    as each starts), and whether the run (or sweep) directory can be created.

    Keys are checked against each job's own composition: an algorithm's keys are its own
    (`-m algo=pql,sac algo.exploration=ape_x` fails for sac). Raises ConfigError,
    CheckpointError for a checkpoint that cannot be read, or TaskError for a task refused
    before its envs are made (tasks.precheck). -> every job's Config, devices resolved
    ([] when Hydra only prints or reruns). CUDA is not initialised here (pql/runtime/mps.py)."""
    from hydra._internal.utils import get_args_parser  # Hydra's own command line: argv read as Hydra reads it
    from hydra.core.utils import setup_globals
    from hydra.errors import ConfigCompositionException
    from omegaconf import OmegaConf

    from pql.config import load_config, register_configs, resolve
    from pql.runtime.distributed import Replicas
    from pql.runtime.run import load_resume
    from pql.runtime.settings import resume_settings
    from tasks import precheck

    args = get_args_parser().parse_args(argv)
    if args.help or args.hydra_help or args.cfg or args.info or args.shell_completion or args.experimental_rerun:
        return []  # Hydra prints something or reruns a pickled job: no settings of a new job to check
    config_name = args.config_name or config_name
    register_configs()
    setup_globals()  # Hydra's ${now:...} resolver, which the run directory's name uses
    replicas = Replicas.from_env()
    jobs = _jobs(args.overrides, args.multirun)
    groups = {
        key: options
        for key, _ in _overrides(args.overrides)
        if (options := _group_options(key, config_dir)) is not None
    }  # group key -> its options
    cfgs, prechecked = [], set()
    for job in jobs:
        for key, value in _overrides(job):
            options = groups.get(key)
            if options is not None and value not in options:
                shown = [FORM_OF_OPTION.get(o, o) if key == "task" else o for o in options]
                raise ConfigError(key, value, f"one of {', '.join(shown)}")
        try:
            composed = _compose(config_dir, config_name, job)
        except ConfigCompositionException as e:
            # An override of a key the config does not have: name the keys there are instead.
            chosen = [arg for arg in job if arg.partition("=")[0] in groups]
            # A DictConfig's container is a dict (to_container is typed for any node).
            tree = cast(dict, OmegaConf.to_container(_compose(config_dir, config_name, chosen), resolve=False))
            _check_keys(job, tree, groups)
            raise ConfigError("override", " ".join(job), str(e).splitlines()[0]) from e
        settings = OmegaConf.masked_copy(composed, [key for key in composed if key != "hydra"])
        # Hydra's own output directory, which is not made yet: a sweep's job's is named only as
        # the job starts, and there checkpoint=auto is checked when the job runs.
        settings.run_dir = "." if args.multirun else OmegaConf.select(composed, "hydra.run.dir")
        cfg = resolve(
            load_config(cast(dict, OmegaConf.to_container(settings, resolve=True))),
            replicas.local_rank if replicas.world > 1 else None,
        ).config
        if not (args.multirun and cfg.checkpoint == CHECKPOINT_AUTO):
            load_resume(resume_settings(cfg), replicas.world)
        task = (cfg.task.name, repr(cfg.task.kwargs), cfg.task.import_module)
        if task not in prechecked:  # a sweep's jobs mostly share their task
            precheck(cfg.task.name, cfg.task.kwargs, cfg.task.import_module)
            prechecked.add(task)
        cfgs.append(cfg)
        if job is jobs[0]:
            key = "hydra.sweep.dir" if args.multirun else "hydra.run.dir"
            _check_run_dir(key, OmegaConf.select(composed, key))
    return cfgs


# The overrides people use most, for `python train.py --help`: (override, what it does).
COMMON_OVERRIDES = (
    ("task=Humanoid", "the task (a file in cfg/task/; your own env: docs/own_env.md)"),
    ("task=dmc/cheetah-run", "a DeepMind Control Suite task (task.action_repeat=2: each action for 2 steps)"),
    ("task=gym:Pendulum-v1", "a Gymnasium id (task.kwargs.<name>=<value>: its keyword arguments)"),
    ("algo=sac", "the algorithm"),
    ("runtime.device=cpu", "auto (CUDA if there is one), cpu, cuda or cuda:<index>"),
    ("task.num_envs=8192", "training envs (by default sized for the device)"),
    ("runtime.max_time_s=600", "a wall-time budget in seconds"),
    ("runtime.max_env_steps=5000000", "an env-step budget"),
    ("runtime.seed=1", "the random seed"),
    ("algo.beta_av=8 algo.beta_pv=4", "the update ratios β_a:v = 1:8 and β_p:v = 1:4"),
    ("replay.kind=prioritized", "prioritized replay (Triton sum-tree on CUDA)"),
    ("runtime.mode=sequential", "the three roles in one process, deterministic under a seed"),
    ("checkpoint=runs/<run>/checkpoint.pt", "resume that run (add test=true to evaluate it instead)"),
    ("checkpoint=auto hydra.run.dir=runs/ant", "resume runs/ant if it has a checkpoint, else start it"),
    ("hydra.run.dir=runs/ant", "where the run writes (default runs/<date>_<time>_<task>_<algo>)"),
    ("wandb.activate=true", "log to Weights & Biases as well as TensorBoard"),
)


def usage(config_dir: str) -> str:
    """pql's `python train.py --help`: what it is, the overrides people use, the tasks and
    algorithms there are, and where the full reference is."""
    from pql import __version__
    from pql.config import ALGORITHMS

    tasks = sorted(_yaml_options(os.path.join(config_dir, "task")) - FORM_OF_OPTION.keys())
    width = max(len(override) for override, _ in COMMON_OVERRIDES)
    return "\n".join(
        [
            f"pql {__version__}: Parallel Q-Learning (Li et al., ICML 2023) and its family for PyTorch.",
            "",
            "usage: python train.py [key=value ...]            train (Ctrl-C writes a checkpoint and stops)",
            "       python train.py -m key=a,b [key=c,d ...]   a sweep: one run per combination, one after another",
            "       torchrun --nproc_per_node=N train.py ...    N data-parallel replicas (docs/distributed.md)",
            "",
            "common overrides:",
            *(f"  {override:<{width}}  {what}" for override, what in COMMON_OVERRIDES),
            "",
            textwrap.fill(
                ", ".join([*tasks, *FORM_OF_OPTION.values()]),
                100,
                initial_indent="tasks:      ",
                subsequent_indent=" " * 12,
            ),
            f"algorithms: {', '.join(ALGORITHMS)}",
            "",
            "Every key, its default and what it allows: docs/configuration.md (or python -m pql.config.reference).",
            "A run writes runs/<date>_<time>_<task>_<algo>/: train.log, metrics.csv, TensorBoard events,",
            "checkpoint.pt, learning_curve.png (docs/logging.md). Compare runs: python -m pql.plot RUN_DIR ...",
            "Hydra's own options: python train.py --hydra-help; the composed settings: python train.py --cfg job",
        ]
    )


def mps_plan(cfgs: list[Config], replicas: int) -> tuple[str, str | None]:
    """(runtime.mps, why MPS would not help) for the jobs of one command, their devices resolved.
    One daemon serves the whole command, so a sweep's jobs must agree on runtime.mps."""
    modes = sorted({cfg.runtime.mps for cfg in cfgs})
    if len(modes) > 1:
        raise ConfigError(
            "runtime.mps",
            ",".join(modes),
            "one value for every job of a sweep (one MPS daemon serves the whole command)",
        )
    processes_on_gpu = [
        cfg
        for cfg in cfgs
        if cfg.runtime.mode == "process"
        and any(str(getattr(cfg.runtime, key)).startswith("cuda") for key in ("device", *ROLE_DEVICE_KEYS))
    ]
    if not processes_on_gpu:
        return modes[0], "no job runs processes on a GPU (runtime.mode=process on CUDA)"
    if replicas > 1:
        return modes[0], "under torchrun pql starts no daemon unless runtime.mps=on"
    return modes[0], None
