"""flows/lab."""
