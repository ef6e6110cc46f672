"""The bottom layer: the errors and exit codes every command documents (`errors`), the
one-line error for a missing optional extra (`extras`), and progress bars and notices
(`progress`). Imports nothing of specconform above it."""
