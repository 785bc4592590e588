"""The generated tables of README.md and the benchmarks pages, one module per family (homes.py names
every table and the file it lives in); benchmarks/readme_tables.py is their command line."""
