"""EventBatch -> spans: the span table (build), its attributes and the options that shape it."""
