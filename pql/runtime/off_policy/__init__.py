"""PQL, PQL-D and SAC on three roles: actor, V-learner, P-learner (see runner.py)."""
