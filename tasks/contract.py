"""The env contract: does an env keep the BatchedEnv protocol of tasks/base.py?

`run_checks(env)` checks an env and reports one line per check; a run performs the quick part on
its evaluation env before any role starts (`raise_on_findings(check_contract(env, quick=True),
task_name)`), and `python -m pql.check_env <task>` (pql/check_env.py) runs every check on a task
built as a run builds it. The checks read the protocol only, so they hold for every form of task
(pql's own, gym:<EnvId>, <module>:<factory>, isaacgym/<Task>).

What each check asserts (the quick part: attributes to final_obs, on a reset() and QUICK_STEPS
steps; the full check adds a rollout of random actions and the last four):

    attributes        num_envs, obs_dim, act_dim, max_episode_steps ints > 0; critic_obs_dim an
                      int, 0 ≤ it < obs_dim; device a torch.device; episode_metrics a tuple of at most
                      MAX_EPISODE_METRICS info entries' names
    action_bounds     action_low, action_high [act_dim] float32 on env.device, finite, low < high
    calls             reset() and step() run without raising and return tensors (step: five
                      values, info a dict)
    shapes            obs, info["final_obs"] [num_envs, obs_dim]; reward, terminated, truncated [num_envs]
    dtypes            obs, final_obs, reward float32; terminated, truncated bool
    device            every returned tensor on env.device
    finite            obs, final_obs and reward without NaN or inf
    done_flags        terminated and truncated never both true for one env
    final_obs         info["final_obs"] present, equal to obs where the env did not finish
    autoreset         where an env finished, obs (the new episode's first) differs from final_obs
    episode_length    no episode runs past max_episode_steps: truncated at the limit
    determinism       a second env of the same task, size and seed repeats the trajectory under
                      the same actions; an env whose class says `deterministic = False` is not
                      held to it (every other env is)
    state_round_trip  where state_dict() does not raise TaskError: it reads back with
                      torch.load(weights_only=True), its tensors on the CPU, and after
                      load_state_dict() the same actions give the same steps (the last not
                      asked of an env that says `deterministic = False`)
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .base import MAX_EPISODE_METRICS, BatchedEnv, TaskError

# The checks, in the order they are reported (the module docstring says what each asserts).
CHECKS = (
    "attributes",
    "action_bounds",
    "calls",
    "shapes",
    "dtypes",
    "device",
    "finite",
    "done_flags",
    "final_obs",
    "autoreset",
    "episode_length",
    "determinism",
    "state_round_trip",
)
QUICK_CHECKS = CHECKS[: CHECKS.index("final_obs") + 1]
QUICK_STEPS = 2
MIN_ROLLOUT_STEPS = 100  # enough calls for a steady steps/s when every env finishes early
EXTRA_STEPS = 2  # past max_episode_steps: by then every env that did not terminate was truncated
ROUND_TRIP_STEPS = 20  # spans episode ends (and so resets) under random actions in the short tasks

# What the protocol wants of each returned tensor: (shape in words, dtype, checked for NaN/inf).
SPEC = {
    "obs": ("[num_envs, obs_dim]", torch.float32, True),
    "reward": ("[num_envs]", torch.float32, True),
    "terminated": ("[num_envs]", torch.bool, False),
    "truncated": ("[num_envs]", torch.bool, False),
    "final_obs": ("[num_envs, obs_dim]", torch.float32, True),
}
Record = dict[str, torch.Tensor]  # one call's tensors by SPEC's names


@dataclass(frozen=True)
class Finding:
    """One failed check: `check` is a key of CHECKS, `message` one line naming what to fix."""

    check: str
    message: str


@dataclass(frozen=True)
class Report:
    """What run_checks found: each check's outcome and the full check's rollout speed."""

    findings: tuple[Finding, ...]  # the first failure of each failed check, in CHECKS order
    passed: tuple[str, ...]
    skipped: dict[str, str]  # check -> why it did not run
    env_steps_per_s: float | None  # num_envs × rollout steps / seconds inside step(); None if quick
    rollout: str  # the rollout's size, "4 envs x 102 steps" ("" if quick)

    def lines(self) -> list[str]:
        """`ok  <check>`, `FAIL <check>: ...` and `skip <check>: ...` in CHECKS order, then steps/s."""
        failed = {f.check: f.message for f in self.findings}
        out = []
        for check in CHECKS:
            if check in failed:
                out.append(f"FAIL {check}: {failed[check]}")
            elif check in self.skipped:
                out.append(f"skip {check}: {self.skipped[check]}")
            elif check in self.passed:
                out.append(f"ok  {check}")
        if self.env_steps_per_s is not None:
            out.append(f"steps/s {self.env_steps_per_s:,.0f} env steps/s ({self.rollout}, time inside step())")
        return out


class _Broken(Exception):
    """An env call failed in a way the checks cannot go past; its finding is recorded."""


class _Checks:
    """Findings (the first of each check), the checks that ran, those skipped and why."""

    def __init__(self):
        self.findings: dict[str, Finding] = {}
        self.done: set[str] = set()
        self.skipped: dict[str, str] = {}
        self.stopped = ""  # the check whose failure stopped the others

    def ran(self, *checks: str) -> None:
        self.done.update(checks)

    def fail(self, check: str, message: str) -> None:
        self.done.add(check)
        self.findings.setdefault(check, Finding(check, message))

    def broken(self, check: str, message: str) -> _Broken:
        self.fail(check, message)
        self.stopped = self.stopped or check
        return _Broken(message)

    def report(self, listed: tuple[str, ...], env_steps_per_s: float | None, rollout: str) -> Report:
        findings = tuple(self.findings[c] for c in CHECKS if c in self.findings)
        passed = tuple(c for c in listed if c in self.done and c not in self.findings)
        skipped = {
            c: self.skipped.get(c, f"not reached ({self.stopped} failed first)")
            for c in listed
            if c not in self.done and (c in self.skipped or self.stopped)
        }
        return Report(findings, passed, skipped, env_steps_per_s, rollout)


def _in_envs(bad: torch.Tensor, num_envs: int) -> str:
    """ " in env(s) [i, ...]" for a mask whose first dimension is the envs', else ""."""
    if bad.dim() == 0 or bad.shape[0] != num_envs:
        return ""
    ids = bad.reshape(num_envs, -1).any(dim=1).nonzero().flatten().tolist()
    return f" in env(s) [{', '.join(map(str, ids[:10]))}{', ...' if len(ids) > 10 else ''}]"


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"


def _difference(a: Record, b: Record, num_envs: int) -> str | None:
    """What differs between two records of the same call ("reward in env(s) [1]"), or None."""
    for name, x in a.items():
        y = b.get(name)
        if y is None or x.shape != y.shape or x.dtype != y.dtype:
            return name
        differs = x != y.to(x.device)
        if x.is_floating_point():
            differs &= ~(torch.isnan(x) & torch.isnan(y.to(x.device)))
        if differs.any():
            return f"{name}{_in_envs(differs, num_envs)}"
    return None


def _cloned(record: Record) -> Record:
    # An env may hand out its own buffers and overwrite them in the next step (Isaac Gym's do).
    return {name: value.clone() for name, value in record.items()}


class _Contract:
    """The protocol's checks on one env's outputs, call after call, with each env's episode length."""

    def __init__(self, env: BatchedEnv, checks: _Checks):
        self.env, self.checks = env, checks
        self.num_envs, self.obs_dim, self.device = env.num_envs, env.obs_dim, env.device
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)

    def call(self, check: str, what: str, fn: Callable, *args):
        try:
            out = fn(*args)
        except Exception as e:
            raise self.checks.broken(check, f"{what} raised {_one_line(e)}") from e
        self.checks.ran(check)
        return out

    def reset(self) -> torch.Tensor:
        obs = self.call("calls", "reset()", self.env.reset)
        if not isinstance(obs, torch.Tensor):
            raise self.checks.broken("calls", f"reset() returned a {type(obs).__name__}; the protocol wants a tensor")
        self._tensor("reset()", "obs", obs)
        self.elapsed.zero_()
        return obs

    def outputs(self, check: str, where: str, out) -> Record:
        """The tensors of one step()'s return; raises _Broken (a finding of `check`) if it has not
        the protocol's form. A missing or non-tensor final_obs is a final_obs finding instead."""
        if not (isinstance(out, (tuple, list)) and len(out) == 5):
            got = f"{len(out)} values" if isinstance(out, (tuple, list)) else f"a {type(out).__name__}"
            raise self.checks.broken(
                check, f"{where} returned {got}; the protocol wants (obs, reward, terminated, truncated, info)"
            )
        obs, reward, terminated, truncated, info = out
        if not isinstance(info, dict):
            raise self.checks.broken(
                check, f"{where} returned info as a {type(info).__name__}; the protocol wants a dict"
            )
        record = {"obs": obs, "reward": reward, "terminated": terminated, "truncated": truncated}
        for name, value in record.items():
            if not isinstance(value, torch.Tensor):
                raise self.checks.broken(
                    check, f"{where} returned {name} as a {type(value).__name__}; the protocol wants a torch.Tensor"
                )
        self.checks.ran("final_obs")
        final_obs = info.get("final_obs")
        if final_obs is None:
            self.checks.fail(
                "final_obs",
                f"{where} returned no info['final_obs']; the protocol wants there the observation that ended "
                "each episode, [num_envs, obs_dim] (equal to obs where the env did not finish)",
            )
        elif not isinstance(final_obs, torch.Tensor):
            self.checks.fail(
                "final_obs",
                f"{where} returned info['final_obs'] as a {type(final_obs).__name__}; the protocol wants a tensor",
            )
        else:
            record["final_obs"] = final_obs
        return record

    def step(self, t: int, actions: torch.Tensor) -> Record:
        """Step the env and check what it returns. t: the step's number since reset()."""
        where = f"step() at step {t}"
        record = self.outputs("calls", where, self.call("calls", where, self.env.step, actions))
        shaped = {name: self._tensor(where, name, value) for name, value in record.items()}
        if shaped["terminated"] and shaped["truncated"]:
            done = self._flags(where, t, record["terminated"].bool(), record["truncated"].bool())
            if shaped["obs"] and shaped.get("final_obs", False):
                self._autoreset(where, done, record["obs"], record["final_obs"])
        return record

    def _tensor(self, where: str, name: str, value: torch.Tensor) -> bool:
        """Check one returned tensor's shape, dtype, device and values -> whether its shape is right."""
        words, dtype, finite = SPEC[name]
        shape = (self.num_envs, self.obs_dim) if "obs" in name else (self.num_envs,)
        self.checks.ran("shapes", "dtypes", "device")
        if tuple(value.shape) != shape:
            self.checks.fail(
                "shapes", f"{where} returned {name} of shape {tuple(value.shape)}; the protocol wants {words} = {shape}"
            )
        if value.dtype != dtype:
            self.checks.fail("dtypes", f"{where} returned {name} of dtype {value.dtype}; the protocol wants {dtype}")
        if value.device != self.device:
            self.checks.fail(
                "device", f"{where} returned {name} on {value.device}; the protocol wants env.device = {self.device}"
            )
        if finite:
            self.checks.ran("finite")
            bad = ~torch.isfinite(value)
            if bad.any():
                self.checks.fail("finite", f"{where} returned {name} with NaN or inf{_in_envs(bad, self.num_envs)}")
        return tuple(value.shape) == shape

    def _flags(self, where: str, t: int, terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
        """done_flags and episode_length -> done [N] bool on env.device."""
        terminated, truncated = terminated.to(self.device), truncated.to(self.device)
        self.checks.ran("done_flags", "episode_length")
        both = terminated & truncated
        if both.any():
            self.checks.fail(
                "done_flags",
                f"{where} returned terminated and truncated both true{_in_envs(both, self.num_envs)}; truncated "
                "means the step limit cut short an episode that did not terminate",
            )
        done = terminated | truncated
        self.elapsed += 1
        over = (self.elapsed >= self.env.max_episode_steps) & ~done
        if over.any():
            self.checks.fail(
                "episode_length",
                f"episodes{_in_envs(over, self.num_envs)} reached max_episode_steps = {self.env.max_episode_steps} "
                f"steps at step {t} without ending; step() must return truncated=True at the step limit",
            )
        self.elapsed.masked_fill_(done, 0)
        return done

    def _autoreset(self, where: str, done: torch.Tensor, obs: torch.Tensor, final_obs: torch.Tensor) -> None:
        """final_obs where no env finished, autoreset where one did. Close, not equal: an env that
        computes the reset observation into final_obs by another path is off by rounding only."""
        same = torch.isclose(
            obs.to(self.device, torch.float32),
            final_obs.to(self.device, torch.float32),
            rtol=1e-5,
            atol=1e-6,
            equal_nan=True,
        ).all(dim=1)
        differs = ~done & ~same
        if differs.any():
            self.checks.fail(
                "final_obs",
                f"{where} returned info['final_obs'] unlike obs{_in_envs(differs, self.num_envs)}, which did not "
                "finish; it must equal obs there",
            )
        if done.any():
            self.checks.ran("autoreset")
            kept = done & same
            if kept.any():
                self.checks.fail(
                    "autoreset",
                    f"{where}: episodes{_in_envs(kept, self.num_envs)} ended but obs equals info['final_obs'] there; "
                    "step() must reset a finished env, return its new first observation as obs and the one that "
                    "ended the episode as info['final_obs']",
                )


def _attributes(env: BatchedEnv, checks: _Checks) -> None:
    """The protocol's attributes; raises _Broken if one the other checks read is unusable."""
    checks.ran("attributes")
    for name in ("num_envs", "obs_dim", "act_dim", "max_episode_steps"):
        value = getattr(env, name, None)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            got = "missing" if value is None else f"{value!r} (a {type(value).__name__})"
            raise checks.broken("attributes", f"env.{name} is {got}; the protocol wants an int > 0")
    critic = getattr(env, "critic_obs_dim", 0)
    if isinstance(critic, bool) or not isinstance(critic, int) or not 0 <= critic < env.obs_dim:
        raise checks.broken(
            "attributes",
            f"env.critic_obs_dim is {critic!r}; the protocol wants an int from 0 to obs_dim - 1 = {env.obs_dim - 1} "
            "(the columns at the end of obs that only the critic reads)",
        )
    device = getattr(env, "device", None)
    if not isinstance(device, torch.device):
        got = "missing" if device is None else f"{device!r} (a {type(device).__name__})"
        raise checks.broken("attributes", f"env.device is {got}; the protocol wants a torch.device")
    metrics = getattr(env, "episode_metrics", ())
    if (
        not isinstance(metrics, tuple)
        or len(metrics) > MAX_EPISODE_METRICS
        or not all(isinstance(name, str) for name in metrics)
    ):
        checks.fail(
            "attributes",
            f"env.episode_metrics is {metrics!r}; the protocol wants a tuple of at most {MAX_EPISODE_METRICS} "
            "info entries' names",
        )


def _action_box(env: BatchedEnv, checks: _Checks) -> tuple[torch.Tensor, torch.Tensor]:
    """Check action_low and action_high -> (low, high) [act_dim] float32 to draw actions in: the
    env's where they are usable (finite, of the right shape), else [-1, 1]."""
    checks.ran("action_bounds")
    shape, usable = (env.act_dim,), True
    bounds = {}
    for name in ("action_low", "action_high"):
        value = getattr(env, name, None)
        if not isinstance(value, torch.Tensor):
            checks.fail("action_bounds", f"env.{name} is {type(value).__name__}; the protocol wants a tensor [act_dim]")
            usable = False
            continue
        if tuple(value.shape) != shape:
            checks.fail(
                "action_bounds", f"env.{name} has shape {tuple(value.shape)}; the protocol wants [act_dim] = {shape}"
            )
            usable = False
        elif not torch.isfinite(value).all():
            checks.fail("action_bounds", f"env.{name} is not finite: {value.tolist()}; actions are drawn in the box")
            usable = False
        if value.dtype != torch.float32:
            checks.fail("action_bounds", f"env.{name} has dtype {value.dtype}; the protocol wants torch.float32")
        if value.device != env.device:
            checks.fail(
                "action_bounds", f"env.{name} is on {value.device}; the protocol wants env.device = {env.device}"
            )
        bounds[name] = value.to(env.device, torch.float32)
    if not usable:
        return -torch.ones(shape, device=env.device), torch.ones(shape, device=env.device)
    low, high = bounds["action_low"], bounds["action_high"]
    if not (low < high).all():
        checks.fail(
            "action_bounds",
            f"env.action_low {low.tolist()} is not below env.action_high {high.tolist()} in every dimension",
        )
    return low, high


def _claims_determinism(env: BatchedEnv) -> bool:
    """Whether the env says that the same seed and actions give the same steps: unless it says
    `deterministic = False` (BatchedEnv.deterministic)."""
    return getattr(env, "deterministic", True) is not False


def _twin(
    make_again: Callable[[], BatchedEnv] | None, history: list[tuple[Record, torch.Tensor | None]], contract: _Contract
) -> BatchedEnv | None:
    """A second env made by make_again() that has repeated `history` (reset, then the steps so far),
    or None: determinism skipped, or failed on the way."""
    env, checks = contract.env, contract.checks
    if not _claims_determinism(env):
        checks.skipped["determinism"] = "the env says deterministic = False"
        return None
    if make_again is None:
        checks.skipped["determinism"] = "no second env to compare with (make_again)"
        return None
    try:
        twin = make_again()
    except Exception as e:
        checks.skipped["determinism"] = f"a second env could not be made: {_one_line(e)}"
        return None
    with contextlib.suppress(_Broken):  # the second env broke the contract: its finding is recorded, it is closed below
        for t, (expected, actions) in enumerate(history):
            if actions is None:
                got = {"obs": contract.call("determinism", "the second env's reset()", twin.reset)}
            else:
                where = f"the second env's step() at step {t}"
                got = contract.outputs("determinism", where, contract.call("determinism", where, twin.step, actions))
            if not _same_step(expected, got, t, contract.num_envs, checks):
                break
        else:
            return twin
    twin.close()
    return None


def _same_step(expected: Record, got: Record, t: int, num_envs: int, checks: _Checks) -> bool:
    checks.ran("determinism")
    diff = _difference(expected, got, num_envs)
    if diff is not None:
        at = "at reset()" if t == 0 else f"at step {t}"
        checks.fail(
            "determinism",
            f"a second env of the same task, size and seed gave another {diff} {at} under the same actions; make the "
            "env deterministic under its seed, or give its class `deterministic = False` to turn this check off",
        )
    return diff is None


def _rollout(
    contract: _Contract, draw: Callable[[], torch.Tensor], twin: BatchedEnv | None, steps: int | None, first_t: int
) -> tuple[int, float]:
    """Random actions after step first_t: `steps` steps, or until every env has finished an episode
    (at least MIN_ROLLOUT_STEPS, at most max_episode_steps + EXTRA_STEPS), the twin (if any) given
    the same actions until it strays. -> (steps, seconds inside env.step())."""
    env, checks = contract.env, contract.checks
    limit = steps if steps is not None else env.max_episode_steps + EXTRA_STEPS
    least = steps if steps is not None else min(MIN_ROLLOUT_STEPS, limit)
    finished = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    seconds = 0.0
    for n in range(1, limit + 1):
        t, actions = first_t + n, draw()
        start = time.perf_counter()
        record = contract.step(t, actions)
        if env.device.type == "cuda":
            torch.cuda.synchronize(env.device)
        seconds += time.perf_counter() - start
        if twin is not None:
            where = f"the second env's step() at step {t}"
            try:
                got = contract.outputs("determinism", where, contract.call("determinism", where, twin.step, actions))
                same = _same_step(record, got, t, env.num_envs, checks)
            except _Broken:
                same = False
            if not same:
                twin = None  # one finding is enough; run_checks closes it
        if record["terminated"].shape == finished.shape:
            finished |= (record["terminated"].bool() | record["truncated"].bool()).to(env.device)
        if n >= least and bool(finished.all()):
            break
    if "autoreset" not in checks.done:
        checks.skipped["autoreset"] = (
            "obs and info['final_obs'] are not both [num_envs, obs_dim] tensors to compare"
            if finished.any()
            else f"no episode ended in {n} steps (max_episode_steps = {env.max_episode_steps}); raise --steps"
        )
    return n, seconds


def _tensors_off_cpu(state, path: str = "") -> str | None:
    """The first entry of a state that holds a tensor on another device than the CPU, or None."""
    if isinstance(state, dict):
        for key, value in state.items():
            found = _tensors_off_cpu(value, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(state, torch.Tensor) and state.device.type != "cpu":
        return f"{path or 'the state'} on {state.device}"
    return None


def _state_round_trip(contract: _Contract, draw: Callable[[], torch.Tensor], first_t: int) -> None:
    """state_dict(), ROUND_TRIP_STEPS steps, the state through torch.save/torch.load as a checkpoint
    carries it, load_state_dict(), the same actions again: the same steps."""
    env, checks = contract.env, contract.checks
    try:
        state = env.state_dict()
    except TaskError as e:
        checks.skipped["state_round_trip"] = f"state_dict() raised {_one_line(e)}"
        return
    except Exception as e:
        checks.fail(
            "state_round_trip", f"state_dict() raised {_one_line(e)}; an env that cannot be saved raises TaskError"
        )
        return
    checks.ran("state_round_trip")
    try:
        plan = [draw() for _ in range(ROUND_TRIP_STEPS)]
        before = [_cloned(contract.step(first_t + k, actions)) for k, actions in enumerate(plan, 1)]
        # After the steps: a state that shares the env's buffers rather than copying them shows here.
        off_cpu = _tensors_off_cpu(state)
        if off_cpu is not None:
            checks.fail("state_round_trip", f"state_dict() holds {off_cpu}; the protocol wants copies on the CPU")
            return
        buffer = io.BytesIO()
        try:
            torch.save(state, buffer)
            buffer.seek(0)
            loaded = torch.load(buffer, weights_only=True)
        except Exception as e:
            checks.fail(
                "state_round_trip",
                f"torch.load(weights_only=True) cannot read state_dict() back ({_one_line(e)}); the protocol wants "
                "CPU tensors, ints, floats, strings and dicts of these",
            )
            return
        contract.call("state_round_trip", "load_state_dict(state_dict())", env.load_state_dict, loaded)
        if not _claims_determinism(env):
            return  # its steps need not repeat: that the state reads back and loads is what holds
        for k, (actions, expected) in enumerate(zip(plan, before), 1):
            where = f"step() at step {k} after load_state_dict()"
            got = contract.outputs(
                "state_round_trip", where, contract.call("state_round_trip", where, env.step, actions)
            )
            diff = _difference(expected, got, env.num_envs)
            if diff is not None:
                checks.fail(
                    "state_round_trip",
                    f"the same actions after load_state_dict() gave another {diff} at step {k} than after "
                    "state_dict(): state_dict() must copy everything the next steps read, load_state_dict() restore it",
                )
                return
    except _Broken:
        return


def run_checks(
    env: BatchedEnv,
    *,
    steps: int | None = None,
    quick: bool = False,
    make_again: Callable[[], BatchedEnv] | None = None,
) -> Report:
    """Check `env` against the protocol (CHECKS says what each check asserts).

    quick: the attributes, a reset() and QUICK_STEPS steps (QUICK_CHECKS). Otherwise also a rollout
    of random actions (uniform in [action_low, action_high]): `steps` steps, or by default until
    every env has finished an episode (at most max_episode_steps + EXTRA_STEPS), checking each step,
    and timed; determinism against make_again() (a zero-argument callable building a fresh env of
    the same task, size and seed; `env` must be as its factory returned it); and, where state_dict()
    does not raise TaskError, a state round trip. Actions come from a generator of the checker's
    own (the global RNG is untouched); `env` is left mid-episode. An exception inside the env's
    calls is a finding, never raised.
    """
    checks = _Checks()
    speed, size = None, ""
    # A call the checks cannot go past (_Broken): its finding is recorded, the report says which stopped.
    with contextlib.suppress(_Broken):
        _attributes(env, checks)
        low, high = _action_box(env, checks)
        generator = torch.Generator(device=env.device).manual_seed(0)
        shape = (env.num_envs, env.act_dim)
        draw = lambda: low + torch.rand(shape, generator=generator, device=env.device) * (high - low)
        contract = _Contract(env, checks)
        history: list[tuple[Record, torch.Tensor | None]] = [({"obs": contract.reset().clone()}, None)]
        for t in range(1, QUICK_STEPS + 1):
            actions = draw()
            history.append((_cloned(contract.step(t, actions)), actions))
        if not quick:
            twin = _twin(make_again, history, contract)
            try:
                n, seconds = _rollout(contract, draw, twin, steps, QUICK_STEPS)
            finally:
                if twin is not None:
                    twin.close()
            speed, size = env.num_envs * n / max(seconds, 1e-9), f"{env.num_envs} envs x {n} steps"
            _state_round_trip(contract, draw, QUICK_STEPS + n)
    return checks.report(QUICK_CHECKS if quick else CHECKS, speed, size)


def check_contract(
    env: BatchedEnv,
    *,
    steps: int | None = None,
    quick: bool = False,
    make_again: Callable[[], BatchedEnv] | None = None,
) -> list[Finding]:
    """The failed checks of run_checks(env, ...): the first finding of each, in CHECKS order."""
    return list(run_checks(env, steps=steps, quick=quick, make_again=make_again).findings)


def raise_on_findings(findings: list[Finding], task_name: str) -> None:
    """Raise TaskError with the first finding in one line, if there is any."""
    if not findings:
        return
    first, more = findings[0], len(findings) - 1
    command = f"python -m pql.check_env {task_name}"
    rest = f"+{more} more: {command} lists them" if more else f"{command} runs every check"
    raise TaskError(f"task {task_name} breaks the env protocol: {first.check}: {first.message} ({rest})")
