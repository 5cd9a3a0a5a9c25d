"""What auditors run: verifying the log against its signed checkpoints and proving single events
(this package's ``cli``; the machinery is in ``ledger.integrity``), and, alongside, diffs, audits and
recount packages.
"""
