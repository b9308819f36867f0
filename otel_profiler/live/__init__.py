"""Inside the training process: the session and its parts, markers, step evidence, triggers."""
