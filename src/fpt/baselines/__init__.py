"""Fully trained baselines of the paper: LSTM, LSTM* and the tutorial CNN."""
