"""report.md, from the machine's description, the step results and the figures read from the
steps' files, and the few lines the console shows at the end."""

from __future__ import annotations

from bench.gpu.formats import fmt_duration, fmt_measure, fmt_rate, table
from bench.gpu.results import Figures, learner_figure, release_verdict, resume_verdict, to_float
from bench.gpu.steps import FAILED, OK, SKIPPED, TIMED_OUT, StepResult
from bench.gpu.targets import target_rows
from bench.kernel_speed import table_rows as kernel_table_rows

# The report directory's files, named once: the check writes them, the report names them.
FILES = {
    "report": "report.md",
    "log": "log.txt",
    "env": "env_throughput.csv",
    "env_profile": "env_profile.csv",
    "learner": "learner.csv",
    "learner_no_mps": "learner_no_mps.csv",
    "learner_eager": "learner_eager.csv",
    "kernels": "kernels.csv",
    "targets": "targets.csv",
    "curve": "return_curve.png",
}
LEARNER_LABELS = {
    "critic_updates_per_s_alone": "critic updates/s, V-learner alone",
    "policy_updates_per_s_alone": "policy updates/s, P-learner alone",
    "actor_env_steps_per_s_alone": "env steps/s, actor alone",
    "bound_env_steps_per_s": "env steps/s the slowest role alone allows",
    "together_env_steps_per_s": "env steps/s, three roles together",
    "together_critic_updates_per_s": "critic updates/s, together",
    "together_policy_updates_per_s": "policy updates/s, together",
    "together_ratio_beta_av": "critic updates per actor step, together",
    "together_ratio_beta_pv": "critic updates per policy update, together",
    "together_efficiency": "together / bound",
}
PROFILE_LABELS = {"physics": "physics", "restart": "restart", "rest": "pql's own work", "step": "whole step"}


def learner_value(quantity: str, value: float | None) -> str:
    if value is None:
        return "—"
    if quantity == "together_efficiency":
        return f"{value:.0%}"
    if quantity.startswith("together_ratio"):
        return f"{value:.2f}"
    return fmt_rate(value)


def targets_table(fig: Figures) -> list[list[str]]:
    """The report's [target, measured, verdict] rows."""
    rows = []
    for t, measured in target_rows(fig):
        verdict = "not measured" if measured is None else "met" if t.met(measured) else "**not met**"
        rows.append([f"{t.text}: {t.threshold()}", "—" if measured is None else fmt_measure(measured, t.unit), verdict])
    return rows


def env_section(rows: list[dict]) -> list[str]:
    body = [
        [
            r["row"],
            r["device"],
            f"{int(r['num_envs']):,}",
            fmt_rate(to_float(r["env_steps_per_s"])) if not r.get("error") else f"failed: {r['error']}",
        ]
        for r in rows
    ]
    return ["## Env throughput (Ant, random actions)", "", *table(["", "device", "N", "env steps/s"], body, "llrr"), ""]


def profile_cell(row: dict | None) -> str:
    """One part of a step as "ms (share)"; the whole step without its share."""
    ms, share = (to_float(row["ms_per_step"]), to_float(row["share"])) if row else (None, None)
    if ms is None:
        return "—"
    return f"{ms:.2f} ms" if row["part"] == "step" or share is None else f"{ms:.2f} ms ({share:.0%})"


def env_profile_section(rows: list[dict]) -> list[str]:
    """ms per step and share of each part (bench/env_throughput.py --profile), one line per N."""
    body = []
    for row, device, n in dict.fromkeys((r["row"], r["device"], r["num_envs"]) for r in rows):
        parts = {r["part"]: r for r in rows if (r["row"], r["device"], r["num_envs"]) == (row, device, n)}
        body.append([row, device, f"{int(n):,}", *(profile_cell(parts.get(part)) for part in PROFILE_LABELS)])
    return [
        "## One env step, in parts (bench/env_throughput.py --profile: physics = env.physics.step, restart = "
        "env.physics.reset, pql's own work = the rest)",
        "",
        *table(["", "device", "N", *PROFILE_LABELS.values()], body, "llrrrrr"),
        "",
    ]


def learner_section(rows: list[dict], no_mps_rows: list[dict], eager_rows: list[dict] | None = None) -> list[str]:
    """The learner bench's figures, a column beside them for each second run that was made: with
    MPS off, and eager (runtime.compile=false, the roles alone)."""
    others = [(label, r) for label, r in (("without MPS", no_mps_rows), ("eager", eager_rows or [])) if r]
    first = (rows or others[0][1])[0]
    quantities = list(dict.fromkeys(r["quantity"] for run in (rows, *(r for _, r in others)) for r in run))
    header = ["", "value", *(label for label, _ in others)]
    body = []
    for q in quantities:
        body.append(
            [
                LEARNER_LABELS.get(q, q),
                learner_value(q, learner_figure(rows, q)),
                *(learner_value(q, learner_figure(r, q)) for _, r in others),
            ]
        )
    return [
        f"## Learner (bench/learner.py: {first['task']}, {int(first['num_envs']):,} envs, "
        f"batch {int(first['batch_size']):,}, {first['device']}, runtime.compile={first['compile']}, "
        f"together run with runtime.mps={first.get('mps') or 'auto'})",
        "",
        *table(header, body, "l" + "r" * (len(header) - 1)),
        "",
    ]


def kernels_section(rows: list[dict]) -> list[str]:
    records = [
        {"operation": r["operation"], "impl": r["impl"], "microseconds": to_float(r["microseconds"]), "note": r["note"]}
        for r in rows
    ]
    return [
        "## Kernels (bench/kernel_speed.py, median per call)",
        "",
        *table(
            ["", "Triton", "PyTorch reference", "flat index", "torchrl PrioritizedSampler"],
            kernel_table_rows(records),
            "lrrrr",
        ),
        "",
    ]


def training_section(fig: Figures) -> list[str]:
    body = []
    for name, run in (("train", fig.train), ("resume", fig.resume)):
        if run is None:
            continue
        returns = [e.eval_return for e in run.evals]
        body.append(
            [
                name,
                f"{run.max_time_s:.0f}",
                "—" if run.env_steps is None else f"{run.env_steps:,}",
                "—" if run.wall_s is None else f"{run.wall_s:.0f}",
                str(len(returns)),
                f"{returns[-1]:,.1f}" if returns else "—",
                f"{max(returns):,.1f}" if returns else "—",
            ]
        )
    lines = [
        "## Training (python train.py task=Ant) and resume",
        "",
        *table(
            [
                "run",
                "max_time_s",
                "env steps (checkpoint)",
                "wall s",
                "evaluations",
                "last eval return",
                "best eval return",
            ],
            body,
            "lrrrrrr",
        ),
        "",
    ]
    if fig.train is not None and fig.train.evals:
        lines += [
            "Train evaluations (env steps: return): "
            + ", ".join(f"{e.env_steps:,}: {e.eval_return:,.0f}" for e in fig.train.evals),
            "",
        ]
    if fig.resume is not None:
        ok, text = resume_verdict(fig.train.env_steps if fig.train else None, fig.resume_start, fig.resume.env_steps)
        lines += [f"Resume: {'ok' if ok else '**failed**'}: {text}.", ""]
    if fig.unreleased is not None:
        ok, text = release_verdict(fig.unreleased)
        lines += [f"Shared CUDA tensors: {'' if ok else '**not released**: '}{text}.", ""]
    if fig.curve:
        lines += [f"![eval return of the train run]({fig.curve})", ""]
    return lines


def build_report(info: dict, results: list[StepResult], fig: Figures, budget_s: float) -> str:
    """report.md from the machine's description (info: "title", "lines"), the step results and
    the figures read from the steps' files."""
    passed = sum(r.status == OK for r in results)
    total_s = sum(r.seconds for r in results)
    lines = [f"# {info['title']}", "", *[f"- {line}" for line in info["lines"]], ""]
    if fig.mps:
        lines += [f"- MPS in the learner bench's together run: {fig.mps}", ""]
    lines += [
        f"**{passed} of {len(results)} steps passed** in {fmt_duration(total_s)} (budget {fmt_duration(budget_s)}). "
        f"Every step's whole output: {FILES['log']}.",
        "",
    ]
    step_rows = []
    for r in results:
        status = r.status
        if r.name == "tests" and r.status == OK and fig.tests_summary:
            status = f"ok: {fig.tests_summary}"
        if r.detail:
            status += f" ({r.detail})"
        step_rows.append(
            [
                r.title,
                status if r.status == OK else f"**{status}**",
                "—" if r.status == SKIPPED else fmt_duration(r.seconds),
            ]
        )
    lines += table(["step", "status", "time"], step_rows, "llr") + [""]
    lines += [
        f"## Targets (docs/gpu.md, H100/H200; also in {FILES['targets']})",
        "",
        *table(["target", "measured", ""], targets_table(fig), "lrl"),
        "",
    ]
    if fig.env:
        lines += env_section(fig.env)
    if fig.env_profile:
        lines += env_profile_section(fig.env_profile)
    if fig.learner or fig.learner_no_mps or fig.learner_eager:
        lines += learner_section(fig.learner, fig.learner_no_mps, fig.learner_eager)
    if fig.kernels:
        lines += kernels_section(fig.kernels)
    if fig.train is not None or fig.resume is not None:
        lines += training_section(fig)
    failures = [r for r in results if r.status in (FAILED, TIMED_OUT)]
    if failures:
        lines += ["## Failures", ""]
        for r in failures:
            lines += [f"### {r.title}: {r.status} ({r.detail})", "", "```", *r.tail(), "```", ""]
    lines += ["## Commands", "", "```", *[r.command for r in results], "```", ""]
    return "\n".join(lines)


def console_summary(results: list[StepResult], fig: Figures, report_path: str) -> list[str]:
    """The few lines printed at the end: the targets, the resume, where the report is."""
    lines = ["", "targets:"]
    lines += [f"  {target}: {measured} ({verdict.strip('*')})" for target, measured, verdict in targets_table(fig)]
    if fig.resume is not None:
        ok, text = resume_verdict(fig.train.env_steps if fig.train else None, fig.resume_start, fig.resume.env_steps)
        lines.append(f"resume: {'ok' if ok else 'FAILED'}: {text}")
    if fig.unreleased is not None:
        ok, text = release_verdict(fig.unreleased)
        lines.append(f"shared CUDA tensors: {'' if ok else 'NOT RELEASED: '}{text}")
    if fig.train is not None and fig.train.evals:
        lines.append(
            f"train: eval return {fig.train.evals[-1].eval_return:,.1f} at {fig.train.evals[-1].env_steps:,} env steps"
        )
    failed = [r for r in results if r.status != OK]
    lines.append(
        f"gpu_check: {len(results) - len(failed)} of {len(results)} steps passed"
        + (f" (not: {', '.join(r.name for r in failed)})" if failed else "")
        + f"; report: {report_path}"
    )
    return lines
