"""A run's policy for deployment: `python -m pql.export <run dir or checkpoint> [--out DIR]`.

Writes, into the run directory's `exported/` (or --out):

    policy.pt     TorchScript (`torch.jit.load`, no pql needed)
    policy.onnx   ONNX, with the metadata below as its metadata_props (needs pql[export])

Both compute what pql's evaluation computes (pql.evaluate): obs [B, policy_obs_dim] float32, the
policy's observations only, raw as the env returns them -> the deterministic action [B, act_dim]
float32 in the units the env takes (the observation normaliser, the clip to [-1, 1] and the map
onto the env's action box inside), for any batch size B. The metadata (PolicyCard) says what the
policy was trained on and what its inputs and outputs mean; policy.pt carries it as the extra
file `metadata.json`. A run writes both at its end (runtime.export), a resumed one over them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from pql.checkpoint import FILE_NAME, CheckpointError, load_checkpoint
from pql.evaluate import deterministic_action
from pql.nets import ObsNormalizer
from tasks.base import PolicyInterface

EXPORT_DIR = "exported"  # beside the checkpoint
TORCHSCRIPT_FILE, ONNX_FILE, METADATA_FILE = "policy.pt", "policy.onnx", "metadata.json"
INPUT_NAME, OUTPUT_NAME = "obs", "action"
ONNX_MISSING = "policy.onnx needs onnx, onnxscript and onnxruntime: pip install -e '.[export]'"


class DeployedPolicy(nn.Module):
    """obs [B, obs_dim] -> the action [B, act_dim] the env takes: pql.evaluate.deterministic_action,
    which reads this module's policy_obs_dim and action bounds as it reads an env's."""

    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(
        self, normalizer: ObsNormalizer, policy: nn.Module, action_low: torch.Tensor, action_high: torch.Tensor
    ):
        super().__init__()
        self.normalizer, self.policy = normalizer, policy
        self.policy_obs_dim = int(normalizer.mean.shape[0])  # all of its input: deterministic_action reads it
        self.register_buffer("action_low", action_low.detach().float().cpu().clone())
        self.register_buffer("action_high", action_high.detach().float().cpu().clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return deterministic_action(self, self.policy, self.normalizer, obs)


@dataclass(frozen=True)
class PolicyCard:
    """What an exported policy was trained on and what its input and output mean."""

    task: str
    algo: str
    obs_dim: int
    act_dim: int
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    interface: PolicyInterface
    software: dict  # pql's version and the commit that trained it (pql.checkpoint.software)

    def metadata(self) -> dict[str, str]:
        """Flat string pairs (ONNX's metadata_props): numbers and lists as JSON."""
        face = self.interface
        pairs = {
            "task": self.task,
            "algo": self.algo,
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "action_low": list(self.action_low),
            "action_high": list(self.action_high),
            "obs_parts": [list(part) for part in face.obs_parts],
            "joint_names": list(face.joint_names),
            "default_joint_pos": list(face.default_joint_pos),
            "action_scale": face.action_scale,
            "input": f"{INPUT_NAME}: [batch, obs_dim] float32, the env's policy observations, raw",
            "output": f"{OUTPUT_NAME}: [batch, act_dim] float32, within [action_low, action_high]",
            "pql_version": self.software.get("pql"),
            "commit": self.software.get("commit"),
        }
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in pairs.items()}


class Exported(NamedTuple):
    torchscript: str
    onnx: str | None  # None: onnx is not installed (ONNX_MISSING)


def checkpoint_file(path: str) -> str:
    """A checkpoint, or the checkpoint of a run directory. Raises CheckpointError if there is none."""
    file = os.path.join(path, FILE_NAME) if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise CheckpointError(
            f"{path}: no checkpoint there (expected a run directory holding {FILE_NAME}, or a checkpoint file)"
        )
    return file


def checkpoint_policy(
    runner_cls, algo, state: dict, obs_dim: int, act_dim: int, device
) -> tuple[nn.Module, ObsNormalizer]:
    """The policy a checkpoint delivers (a policy of `runner_cls` for its algorithm's section
    `algo`, reading obs_dim observations: an env's policy_obs_dim) and its observation
    normaliser, on device."""
    policy = runner_cls.make_policy(algo, obs_dim, act_dim).to(device).eval()  # a network's inference mode
    policy.load_state_dict(state["policy"])
    normalizer = ObsNormalizer(obs_dim).to(device)
    normalizer.load_state_dict(state["normalizer"])
    return policy, normalizer


def deployed_policy(state: dict, env=None) -> tuple[DeployedPolicy, PolicyCard]:
    """The policy a checkpoint's state delivers, on the CPU in inference mode, and its card. `env`:
    an env of the run's task (the run's evaluation env at its end); None makes one env of it on
    the CPU, for the sizes, the action box and the interface."""
    from pql.config import load_config
    from pql.envs import build_env
    from pql.runtime.settings import load_runner

    cfg = load_config(dict(state["config"]))
    made = env is None
    if made:
        env = build_env(cfg.task, 1, torch.device("cpu"), cfg.runtime.seed)
    try:
        obs_dim, act_dim = env.policy_obs_dim, env.act_dim
        low, high = env.action_low.cpu(), env.action_high.cpu()
        card = PolicyCard(
            cfg.task.name,
            cfg.algo.name,
            obs_dim,
            act_dim,
            tuple(low.tolist()),
            tuple(high.tolist()),
            env.interface,
            dict(state.get("software") or {}),
        )
    finally:
        if made:
            env.close()
    policy, normalizer = checkpoint_policy(load_runner(cfg.algo.name), cfg.algo, state, obs_dim, act_dim, "cpu")
    return DeployedPolicy(normalizer, policy, low, high).eval(), card


def export(policy: DeployedPolicy, card: PolicyCard, out_dir: str) -> Exported:
    """Write policy.pt and (with onnx installed) policy.onnx into out_dir, each whole or not at all."""
    os.makedirs(out_dir, exist_ok=True)
    example = torch.zeros(2, card.obs_dim)
    metadata = card.metadata()
    torchscript = os.path.join(out_dir, TORCHSCRIPT_FILE)
    with torch.no_grad(), _quiet():
        traced = torch.jit.trace(policy, example)
    _replace(torchscript, lambda tmp: torch.jit.save(traced, tmp, _extra_files={METADATA_FILE: json.dumps(metadata)}))
    try:
        import onnx
        import onnxscript  # noqa: F401  (torch's ONNX exporter needs it)
    except ImportError:
        return Exported(torchscript, None)
    onnx_path = os.path.join(out_dir, ONNX_FILE)

    def write_onnx(tmp: str) -> None:
        with _quiet():
            program = torch.onnx.export(
                policy,
                (example,),
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_shapes={"obs": {0: torch.export.Dim("batch")}},
                dynamo=True,
                verbose=False,
            )
        assert program is not None, "dynamo=True returns the program"
        model = program.model_proto
        for key, value in metadata.items():
            model.metadata_props.add(key=key, value=value)
        onnx.save(model, tmp)

    _replace(onnx_path, write_onnx)
    return Exported(torchscript, onnx_path)


def export_checkpoint(path: str, out_dir: str | None = None, env=None) -> Exported:
    """Export the policy of the checkpoint at `path` (a run directory or a checkpoint file) into
    out_dir, by default `exported/` beside the checkpoint."""
    file = checkpoint_file(path)
    policy, card = deployed_policy(load_checkpoint(file), env)
    return export(policy, card, out_dir or os.path.join(os.path.dirname(os.path.abspath(file)), EXPORT_DIR))


def _replace(path: str, write) -> None:
    """Write a file through a temporary one renamed over it: a crash leaves the old file or the new."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


@contextlib.contextmanager
def _quiet():
    """Tracing and ONNX export without their notices: TorchScript's deprecation (policy.pt is for
    programs that load TorchScript, as rsl_rl's users' do) and the exporter's progress lines."""
    loggers = [
        logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript", "onnx_ir")
    ]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pql.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a run directory (its checkpoint.pt) or a checkpoint file")
    parser.add_argument("--out", help=f"the directory to write into (default: {EXPORT_DIR}/ beside the checkpoint)")
    args = parser.parse_args(argv)
    from pql.config import ConfigError
    from tasks import TaskError

    try:
        files = export_checkpoint(args.path, args.out)
    except (CheckpointError, ConfigError, TaskError) as e:
        print(f"pql.export: {e}", file=sys.stderr)
        return 2
    print(f"pql.export: wrote {files.torchscript}")
    print(f"pql.export: wrote {files.onnx}" if files.onnx else f"pql.export: no policy.onnx: {ONNX_MISSING}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
