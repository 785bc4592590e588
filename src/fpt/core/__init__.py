"""The ground floor: the one error type, paths and atomic writes, JSON read back, process settings and
the parent watch (runtime), devices, what a score means and the names the command line offers (choices);
none of it imports the rest of fpt."""
