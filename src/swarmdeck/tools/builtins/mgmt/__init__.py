"""The maintenance tools of the packaged `mgmt` plugin (granted, never offered by default)."""

from __future__ import annotations

from swarmdeck.tools.base import Tool
from swarmdeck.tools.builtins.mgmt.fleet import FLEET_TOOLS
from swarmdeck.tools.builtins.mgmt.purges import PURGE_TOOLS
from swarmdeck.tools.builtins.mgmt.stats import STATS_TOOLS
from swarmdeck.tools.builtins.mgmt.sweeper import SWEEPER_TOOLS

MGMT_TOOLS: list[Tool] = [*SWEEPER_TOOLS, *STATS_TOOLS, *PURGE_TOOLS, *FLEET_TOOLS]
