"""Evaluation of RoPE scaling methods over lengths: one sweep machinery, tasks and engines plugged into it.

Shared here: model loading and method switching with the frequency check (``model``), dtype choice (``cpu``),
data parallelism (``dist``), the results-folder lock (``lock``), run identity for ``--resume`` (``identity``),
progress (``progress``), Ctrl-C / SIGTERM handling (``interrupt``), the output folder (``output``) and the sweep
driver (``sweep``). Tasks (what a cell is and how it is scored) live in ``ropectl.eval.tasks``; engines (the
model that scores a batch) in ``ropectl.eval.engines``. Nothing here imports the CLI, typer or rich.
"""
