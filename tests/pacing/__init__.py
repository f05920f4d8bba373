"""The pacing tests (a package: its conftest is its own module)."""
