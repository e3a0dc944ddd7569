"""Fleet simulator for bench/autoscale.py: traces, the discrete-event fleet, baselines and reports."""
