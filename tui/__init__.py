"""queuetop's user interface: the command line and the Textual dashboard.

- the command line: cli.py builds the parser from one module per command group (commands/) and
  is the one place an error becomes a stderr line and an exit code; entry.py is the console
  script (it masks passwords in the process title first, title.py);
- the dashboard: app.py starts it on the hosts asked for; dashboard/ is the app and its parts
  (hosts, bars, the panels' view, actions, replay, keys, the command palette); widgets/ the
  panels (widgets/panels/, one module per panel) and the keyed table they update in place;
  screens/ the modal screens; messages.py what threads post to it; backend.py what it may do to
  the database;
- report.py (a snapshot as text), format.py (numbers and times as shown), sample.py (the
  deterministic sample source), bench.py (the dashboard's own benchmark).
"""
