"""Example recipes for recipe data jobs (seed 002).

``tir`` is the tool-integrated-reasoning math recipe (eight problem types, two structures each,
exact answers); ``tir_calibration`` holds its two calibrators (recorded evaluation reports and a
deterministic rule-based solver). Neither needs a model or a GPU.

This ``__init__`` imports nothing so that importing one submodule stays cheap.
"""
