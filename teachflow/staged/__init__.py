"""Polymorphic functions: ``tfl.function``, one concrete function per input signature.

The chapters, in reading order:

- `signature`: binding-time analysis: what a trace depends on, and how two calls are told apart;
- `concrete`: one trace, compiled, and what calling it does;
- `function`: ``tfl.function`` and ``tfl.compile``: the concrete functions, retraced with reasons.
"""
