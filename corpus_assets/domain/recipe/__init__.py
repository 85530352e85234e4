"""Recipe data jobs (seed 002): budgeted generate → clean → dedup/exclude → calibrate → select.

Pure Python, importable without Dagster. ``protocol`` holds the shared types a recipe and a
calibrator code against; ``config`` the job configuration; ``executor`` runs a job into an output
directory; ``snapshot`` writes and verifies the published dataset; ``hf_export`` exports the
training view to a Hugging Face ``datasets`` directory; ``cli`` is ``corpus recipe run``.

This ``__init__`` imports nothing so that importing one submodule stays cheap.
"""
