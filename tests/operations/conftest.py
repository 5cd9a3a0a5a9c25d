"""Fixtures of the operations tests. ``ops`` is the helper module (``ops_support.py`` next to this file),
loaded by path because tests run with ``--import-mode=importlib``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

_HERE = Path(__file__).resolve().parent


def load_ops() -> ModuleType:
    name = "caucus_operations_tests_support"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _HERE / "ops_support.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def ops() -> ModuleType:
    return load_ops()
