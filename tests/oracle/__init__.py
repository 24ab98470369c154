"""The truth oracle: every library's queues, made through the library's own API, counted by
ground-truth SQL written from the library's own fetch query, and compared with what queuetop
shows under the accuracy contract (`contract.py`)."""
