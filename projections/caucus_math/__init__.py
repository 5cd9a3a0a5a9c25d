"""The old import path of the caucus math, which now lives in :mod:`ledger.caucus_math`.

Why it moved: producers validate with the same math the projections tally with, and neither package may
import the other; the math is the domain core both stand on. This name stays so code written against
``projections.caucus_math`` (and its submodules) keeps working with the very same objects. New code
imports ``ledger.caucus_math``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import ledger.caucus_math as _moved
from ledger.caucus_math import *  # noqa: F403 - the same public names
from ledger.caucus_math import __all__ as __all__

for _info in pkgutil.iter_modules(_moved.__path__):
    sys.modules[f"{__name__}.{_info.name}"] = importlib.import_module(f"{_moved.__name__}.{_info.name}")
