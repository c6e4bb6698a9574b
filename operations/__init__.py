"""The write side of streamctl: plans, the journal, backups, the lock, and the planners of the
mutating commands (align). Every mutation follows docs/model.md#the-mutation-path: inspect,
plan, classify, execute under a lock with a backup and a journal, verify."""
