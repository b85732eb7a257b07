"""``ropectl recommend``: rank methods and factors for a target length from paired evidence.

``decide`` holds the rule (what separates, what ships), ``ship`` the line and commands that ship the winner (the
unscaled base or the checkpoint unchanged, named as what they are), ``data`` reads the eval results it decides on, ``plan`` says
what the sweeps will run and cost before they run, and ``run`` runs them on one load of the model.
"""

from ropectl.recommend.decide import *  # noqa: F403 (the rule is the package's API)
from ropectl.recommend.decide import __all__  # noqa: F401
