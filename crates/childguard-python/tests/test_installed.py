"""The package under test is the installed wheel, not the source tree."""

import os
import sys

import childguard
import childguard._native


def test_imported_from_the_installed_wheel():
    location = os.path.dirname(childguard.__file__)
    assert "site-packages" in location, f"childguard imported from {location}, not a wheel"
    assert childguard._native.__file__.endswith(".abi3.so"), childguard._native.__file__
    assert sys.prefix != sys.base_prefix, "not running in a venv"
    assert childguard.__version__ != "0+unknown"
    assert childguard.DEFAULT_LADDER == "HUP:1s,TERM:2s,KILL:5s"
