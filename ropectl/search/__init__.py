"""``ropectl search``: scaling parameters found on the user's own model, against the best closed-form method.

``spaces`` (what each searchable method may vary, with its bounds), ``fitness`` (one model load, a rotary rebuild
per trial, PPL and needle answer-token loss through the evaluation engine protocol), ``study`` (Optuna's storage,
samplers, resume and identity), ``run`` (the search itself), ``report`` (held-out, paired comparison and the
decision). Stage 2, LongRoPE's per-dimension factors, is ``longrope`` (an evolutionary search). Optuna and cmaes are
the ``[search]`` extra, imported only when a search runs.
"""
