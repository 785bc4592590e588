"""The ground floor: the one error type, paths and atomic writes, JSON read back, process settings and
the parent watch (runtime), devices and what a score means; none of it imports the rest of fpt."""
