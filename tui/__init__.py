"""queuetop's Textual dashboard and command-line entry point."""
