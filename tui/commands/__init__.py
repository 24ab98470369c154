"""The `queuetop` commands, one module per group, each with `register(subparsers)` adding its
parsers and the functions that run them (`func(ctx) -> exit code`).

tui/cli.py builds the command line from the groups (its GROUPS, in the order `--help` lists
them), dispatches, and turns every error into the one-line report and the exit code PRODUCT.md
defines: a command raises (dbcore.errors) and never prints an error itself. What the groups
share: context.py (the databases a command acts on, its output), options.py (the parser class,
bounded numbers, the connection options, `leaf`), bodies.py (message bodies from the command
line), watching.py (sampling targets on a schedule).

This file imports none of them: a group imports what it shares, cli.py imports the groups.
"""
