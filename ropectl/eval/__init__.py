"""Evaluation of RoPE scaling methods over lengths: one sweep machinery, tasks and engines plugged into it.

Here: run identity for ``--resume`` (``identity``), progress (``progress``), the settings tasks parse alike
(``settings``), timing estimates (``timing``) and paired statistics (``stats``). Tasks (what a cell is and how it is
scored), their contract with the driver (``tasks.contract``) and the sweep driver itself (``tasks.sweep``) live in
``ropectl.eval.tasks``; engines (what loads a model, switches its RoPE with the frequency check and answers the three
scoring calls of ``engines.requests``) in ``ropectl.eval.engines``. What every command shares (the model source and
its loading, the corpus, data parallelism, the results folder and its lock, Ctrl-C / SIGTERM) is ``ropectl.runtime``,
below this package. Nothing here imports the CLI, typer or rich.
"""
