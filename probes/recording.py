"""Record and replay: snapshots as compressed JSON lines, and a clock that plays them back.

A recording is a gzip file of JSON lines, one snapshot each (`Snapshot.to_json`, with its
`host`), in the order they were taken. Each snapshot is a gzip member of its own, written whole
(one write): the file is a valid gzip file after every snapshot, whatever happens next. A write
that fails (a full disk) is cut back to the last whole snapshot, so `gzip -t` passes and every
snapshot written before it is read back; a recorder killed mid-write leaves at most the member
it was writing incomplete. When the file passes `max_bytes` it is rotated as logrotate does: FILE
becomes FILE.1, FILE.1 becomes FILE.2, ..., and at most `keep` old files are kept; recording into
a FILE that exists rotates it first. Files are created afresh, readable by their owner only (a
snapshot carries queries), and a symbolic link is not followed.

Reading takes what it can and says what it could not, in one warning line: a recording is read
back from all its files, oldest first; damaged gzip data is skipped up to the next member, an
incomplete last snapshot is dropped, and a line that is no snapshot (not JSON, nested too deep,
another shape than the model's: `"queues": null`, `"depth": "12"`) is skipped, counted, the first
named by file and line. Recordings by earlier versions (one gzip member, flushed after each line)
read as before. What is not a recording (not gzip, no line a snapshot, not a regular file: a
FIFO, a device, a directory) is a UsageError, one line, exit 2. Loading checks each line's
version, time and host (a replay of hours must open in seconds) and the first snapshot of each
host in full; every other snapshot is checked in full when it is shown (`Track.snapshot` raises
ShapeError), and what is shown instead of a damaged one is the one before it: the app only ever
sees whole snapshots.

`ReplayClock` plays a recording on a recorded clock: its position is a time of the recording,
advanced at `speed` times real time while playing, moved by seek and step, and each host's
sink gets the latest snapshot taken at or before the position. Nothing here touches a database.

Where each part lives: writing and rotating, probes/recorder.py; the gzip members read back,
probes/recordfile.py; snapshots and hosts read from the lines, probes/readback.py; the replay
clock, probes/replay.py. Their names are re-exported here, where the command line and the
dashboard import them from.
"""

from .readback import Recording as Recording
from .readback import Track as Track
from .readback import parse_line as parse_line
from .readback import read_log as read_log
from .readback import read_warnings as read_warnings
from .recorder import DEFAULT_KEEP as DEFAULT_KEEP
from .recorder import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from .recorder import Recorder as Recorder
from .recorder import recording_files as recording_files
from .recordfile import MAX_LINE as MAX_LINE
from .recordfile import Damage as Damage
from .recordfile import read_lines as read_lines
from .replay import GAP_KEY as GAP_KEY
from .replay import SPEEDS as SPEEDS
from .replay import ReplayClock as ReplayClock
from .replay import ReplaySource as ReplaySource
from .replay import first_recorded_at as first_recorded_at
from .replay import gap_snapshot as gap_snapshot
from .replay import log as log
