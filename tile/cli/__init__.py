"""The command line (`python -m tile ...`) and `make demo`: users of the public API."""
