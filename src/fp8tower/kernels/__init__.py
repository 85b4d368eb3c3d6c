"""Triton kernels. Importing a module here imports triton: only do it lazily."""
