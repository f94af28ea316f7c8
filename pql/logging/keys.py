"""Names shared by the trainer (which logs them), the console line and the plots (which read them).

The console line picks scalars by these names; any other key is logged (CSV, TensorBoard,
wandb) but not shown on the console.
"""

EVAL_RETURN = "eval/return"  # mean undiscounted return of the evaluation episodes
UPDATES_PER_S = "updates_per_s/"  # + role, e.g. "updates_per_s/v_learner"
RATIO = "ratio/"  # + measured ratio, e.g. "ratio/beta_av" (critic updates per actor step)
LOSS = "loss/"  # + loss, e.g. "loss/critic"
EVAL_VIDEO = "eval/video"  # an evaluation's video (runtime.video_every): TensorBoard and wandb

VIDEOS_DIR = "videos"  # in the run directory: eval_<env steps>.mp4

METRICS_CSV = "metrics.csv"
LEARNING_CURVE_PNG = "learning_curve.png"
CONFIG_JSON = "config.json"
