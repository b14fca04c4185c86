"""What reads finished plans to tell a user about them, beside the Plan record: diff.py (two
plans' decisions), explain.py (re-plans a plan to say why; its gathers: explain_gather.py),
memory.py (memory reports and seed 001's Fig. 10), sharding.py (a ZeRO-3 plan's gathers),
placement.py (the words for what memory planning did to a tensor), replay.py (a plan run on
real bytes against the reference interpreter), plots.py (timelines and curves)."""
