"""The field's reference methods, run beside fpt's score: the classical statistical baselines a
forecasting result is read against (statsforecast's Naive, SeasonalNaive, Theta, AutoETS and
AutoARIMA, and M4's Naive2), scored with the competitions' metrics (fpt.tasks.forecast_metrics) over a
collection of series, or by MSE and MAE over the windows of one multivariate series (fpt.reference.windows)."""
