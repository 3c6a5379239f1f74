"""Configuration from measured costs: timing (``timing``), what is measured (``measure``), the
expected-speed model (``speed_model``), the cache (``cache``), the auto-configuration
(``autoconfig``), the shape a generation runs (``shape``), the check of a run against its
prediction (``recheck``), the machine (``machine``) and the dtype probe (``dtype_probe``)."""
