"""Many runs: replications on local processes or a Dask cluster, sweeps over config values, and their pooled
figures.

May import every package up to :mod:`chaosd.experiment`."""
