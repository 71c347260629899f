"""The read model of the store for people who watch it: plain dataclasses that the CLI's
`sessions ls/show/tail`, the TUI and (later) a web portal all read, so they agree."""
