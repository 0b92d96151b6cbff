"""dgno.train"""

from dgno.train.loop import *  # noqa: F403  (temporary while the module is split)
