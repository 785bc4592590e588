"""A trained run put to use: predictions on new inputs (predict), exports for other tools (export) and
the scikit-learn estimators (estimators)."""
