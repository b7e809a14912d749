"""Model builders: commands that write offline Hugging Face cache snapshots.

Rule 1: nothing in the serving path imports this package; a builder only writes
files that the production loader then reads through its ordinary path.
Rule 2: every builder publishes through `snapshot`, so each snapshot is written
atomically, named by a content hash, and laid out the way the hub cache is.
"""
