"""Drop-in compatibility modules for other profilers' Python APIs."""
