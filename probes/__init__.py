"""Read-only samplers of database state, and what is done with their samples:

- the probes of one database, PostgreSQL's (postgres.py) and SQL Server's (mssql.py), each
  taking a probe session (session.py); the queue sources they read every kind of queue through
  (sources/); the blocking tree (locks.py: built from the locks probe's rows, lockrows.py, and
  labelled as a DBA would, locklabels.py), a queue's details (details.py), and how a probe's
  failure is told (failures.py);
- the snapshot model (model.py: a `Snapshot` of the samples in samples.py, with its JSON form,
  jsonform.py) and the scheduler that composes one per cycle (sampler.py);
- the user's configuration (config.py reads it, configmodel.py holds it);
- recording and replay (recording.py: recorder.py, recordfile.py, readback.py, replay.py) and
  the Prometheus exporter (prometheus.py).

Nothing here imports textual or tui/.
"""
