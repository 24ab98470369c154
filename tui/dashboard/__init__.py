"""The live dashboard (Textual).

Data flow, one direction each way:
- probe → snapshot → message → widget: the sampler (or any `SnapshotSource`) calls the sink from
  its thread; the sink posts `SnapshotArrived` (a newer one replaces an older one still queued);
  the app hands the snapshot to each panel, which updates its rows in place.
- UI action → engine command → database: a key or palette command opens a prompt or a
  confirmation; the action runs in a thread worker (`EngineControls`, or one admin statement) and
  reports back with a notification. The event loop never waits on the database.

The app (app.py) composes its parts and routes between them: hosts.py (the databases, a tab
each), view.py (the panels), bars.py (host, status and notice lines), replay.py (recording and
replaying), actions.py (acting on the database, with engine_actions.py parsing the prompts),
commands.py (the command palette) and keymap.py (the key table and the config's [keys]).
"""

from .app import QueuetopApp
from .bars import NOTICE_SECONDS, HostBar, NoticeBar, StatusBar
from .commands import EngineCommands
from .engine_actions import ENGINE_ACTIONS, MissingQueue, run_engine_action, scenario_summary
from .hosts import INTERVALS, Backend, Host, HostSpec, SnapshotSource
from .keymap import _key_is_possible, check_keymap
from .view import PANELS

__all__ = [
    "ENGINE_ACTIONS",
    "INTERVALS",
    "NOTICE_SECONDS",
    "PANELS",
    "Backend",
    "EngineCommands",
    "Host",
    "HostBar",
    "HostSpec",
    "MissingQueue",
    "NoticeBar",
    "QueuetopApp",
    "SnapshotSource",
    "StatusBar",
    "_key_is_possible",
    "check_keymap",
    "run_engine_action",
    "scenario_summary",
]
