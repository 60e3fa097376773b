"""Seeing what the compiler does: graph layout, the pass stepper widget, static pages."""
