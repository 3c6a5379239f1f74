"""spectr-gbv."""
