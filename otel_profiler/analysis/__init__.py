"""Analyses over EventBatches: statistics, breakdowns, the summary. Never imports exporters or the CLI."""
