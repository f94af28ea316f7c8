"""The GPU check behind `python bench/gpu_check.py`, one job per module:

- steps: running one step as a subprocess within a time limit, ending it with its children;
- results: reading what the steps left: the benches' CSVs, the runs' files, the steps' output;
- targets: the H100/H200 targets, what measures each, targets.csv and docs/gpu.md's table;
- formats: numbers and Markdown tables as the report and the docs show them;
- report: report.md and the console's closing lines;
- machine: the machine's description: GPU, software, host, MPS daemon;
- check: the steps of one check in order within its budget, the report rewritten after each.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
