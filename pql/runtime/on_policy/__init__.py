"""PPO and IMPALA: rollouts of a Gaussian policy (rollout.py) and their runners."""
