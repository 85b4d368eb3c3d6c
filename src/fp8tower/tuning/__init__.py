"""Tuning: timer.py (the one CUDA-graph/event timer, cold-L2 rotation), ceiling.py (the
GPU's read ceiling), cache.py (the versioned decision cache, Entry), search.py (tune_problem,
planned_configs). Import the submodule you need; nothing is re-exported here."""
