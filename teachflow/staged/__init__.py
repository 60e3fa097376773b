"""Polymorphic functions: ``tfl.function``, one concrete function per input signature.

The chapters, in reading order:

- `signature`: binding-time analysis: what a trace depends on, and how two calls are told apart;
- `calls`: a staged function called from traced code, as one ``call`` node; recursion refused;
- `guard_code`: what a trace assumes about state, checked before a call by generated Python;
- `concrete`: one trace, compiled, and the plain route of a call: guards, executor, write-back;
- `fast_path`: the same call written as one generated function, an optional layer for speed;
- `function`: ``tfl.function`` and ``tfl.compile``: the concrete functions, retraced with reasons.
"""
