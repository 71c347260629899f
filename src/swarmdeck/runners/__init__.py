"""External runners: OpenCode, Claude Code and Codex CLI as workers (issue 33).

This package holds the runner layer below `dispatch`; so far it installs, removes and
reports the pinned runner packages in swarmdeck's home (`runners/install.py`)."""
