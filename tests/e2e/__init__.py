"""The end-to-end tests (a package: its conftest is its own module)."""
