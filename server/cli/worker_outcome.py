"""How a worker's look at one piece of work (a run to drive, a compensation to make) ended."""

from __future__ import annotations

from enum import Enum


class Outcome(Enum):
    DONE = "done"                 # made, ended or paused here, or left to the process that drives it
    TAKEN = "taken"               # another live process is taking it over: looked at again after a poll
    REFUSED = "refused"           # cannot be made here (said on stderr): never tried again by this worker
    UNAVAILABLE = "unavailable"   # the database went away: taken again once it is back
