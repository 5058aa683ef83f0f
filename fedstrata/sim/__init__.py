"""Virtual-time simulation of a federation with SimPy."""
