"""The engines-as-oracle tests (a package, so that its conftest is not the top-level
tests/conftest.py's namesake: without it, `from conftest import ...` in tests/*.py read this
one whenever this folder was collected first)."""
