"""`preflab report`: one self-contained HTML page of what the store knows."""
