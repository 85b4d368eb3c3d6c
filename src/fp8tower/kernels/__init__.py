"""Triton kernels and the facts about them. Importing a kernel module imports triton: only do
it lazily. configs.py (configs, sm_90 limits) is pure Python. Never imports backends/."""
