"""pql: Parallel Q-Learning (Li et al., ICML 2023) and its family on one runtime, for PyTorch."""

# The one place the version is written: setup.py reads it from this line, the settings line of
# every run prints it, and CHANGELOG.md names the changes of each.
__version__ = "0.2.0"
