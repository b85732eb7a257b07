"""``python -m ropectl.verify.worker JOBS.json OUT.json``: verify's jobs (``score.Job``) run by another venv's Python
(``remote.run_worker``), through the same ``score.run_job`` as in-process. A refusal is an answer: its problem and
fix, as one line the caller prints."""

from __future__ import annotations

import json
import sys


def main() -> None:
    from ropectl.errors import RopectlError
    from ropectl.verify.score import Job, run_job

    jobs = json.loads(open(sys.argv[1]).read())
    results = {}
    for i, data in enumerate(jobs):
        name = "job" if i == 0 else f"job{i}"
        try:
            results[name] = run_job(Job.from_dict(data))
        except RopectlError as exc:
            results[name] = {"error": exc.problem, "fix": exc.fix}
        except Exception as exc:  # noqa: BLE001  the engine's own failure, quoted
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:1000], "fix": "see the engine's own message"}
        with open(sys.argv[2], "w") as fh:  # after each job: a crash keeps the earlier answers
            json.dump(results, fh)


if __name__ == "__main__":
    main()
