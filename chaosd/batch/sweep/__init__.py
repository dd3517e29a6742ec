"""``chaosd sweep``: the parameters it varies, the runs it makes, the results (knee, collapse) and their chart."""
