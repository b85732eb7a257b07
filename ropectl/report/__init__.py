"""``report``: the evidence card of an extended checkpoint against its base (effective length at the target,
short-context retention, one verdict). Core only: the CLI is ``ropectl.cli.report_cmd``."""
