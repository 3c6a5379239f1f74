"""pytest's root conftest of the tests: its presence puts tests/ on sys.path (pytest's default
"prepend" import mode inserts the first folder without an ``__init__.py``), so that every test
module imports the shared code as ``helpers.<module>`` (tests/helpers/) without a pythonpath
setting.  Shared fixtures live there too and are imported by the modules that use them."""
