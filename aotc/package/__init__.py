"""Packaging: the Program (compiled model as data), memory planner, bundle writer, build helpers.

program.py (Program) · memory_plan.py (arena offsets) · bundle.py (write_bundle) ·
c_header.py / c_source.py / weights.py / templates.py (the bundle's files) ·
build.py (make, run_model, LoadedBundle via loaded.py)
"""
