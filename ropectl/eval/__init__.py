"""Evaluation of RoPE scaling methods over lengths: one sweep machinery, tasks and engines plugged into it.

Shared here: the model source, the methods as evaluated, device and dtype (``model``), dtype choice (``cpu``),
data parallelism (``dist``), the results-folder lock (``lock``), run identity for ``--resume`` (``identity``),
progress (``progress``), Ctrl-C / SIGTERM handling (``interrupt``), the output folder (``output``) and the sweep
driver (``sweep``). Tasks (what a cell is and how it is scored) live in ``ropectl.eval.tasks``, their contract with
the driver in ``tasks.contract``; engines (what loads a model, switches its RoPE with the frequency check and
answers the three scoring calls of ``engines.requests``) in ``ropectl.eval.engines``. A command that loads, patches
and scores (the fine-tune and parameter-search commands to come) builds on the same two doors.
Nothing here imports the CLI, typer or rich.
"""
