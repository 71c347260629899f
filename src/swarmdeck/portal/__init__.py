"""The web portal (`swarmdeck portal`, the `portal` extra): the fleet, the session tree and
each session's live transcript in a browser, over the same view models as the TUI."""
